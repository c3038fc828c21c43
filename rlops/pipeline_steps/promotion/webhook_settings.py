"""The settings of the webhook receiver: the ``promotion.webhook`` block of params, with the HMAC
secret and the Airflow token read from the environment. ``embedded`` mode runs a requested
promotion in the receiver's process; ``airflow`` mode triggers the pack's promotion DAG.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlops.common import airflow_api
from rlops.common.config import resolve_local
from rlops.common.errors import UserError
from rlops.common.http_server import DEFAULT_READ_TIMEOUT_S
from rlops.common.params_sources import params_block

EMBEDDED, AIRFLOW = "embedded", "airflow"


@dataclass(frozen=True)
class WebhookSettings:
    """The ``promotion.webhook`` block of params, with the secret and token read from the env."""

    mode: str
    secret: str
    airflow_url: str
    airflow_token: str | None
    dag_id: str
    airflow_credentials: str | None = None
    """A credentials file (``rlops stack up`` writes one): the token is then fetched and renewed, never
    held past its expiry as a fixed ``airflow_token`` would be."""
    max_body_bytes: int = 65_536
    tolerance_s: int = 300
    state_db: str = "rlops-data/webhook.db"
    retry_s: float = 30.0
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    """A connection whose request has not arrived whole this long after the receiver began waiting
    for it is closed (:mod:`rlops.common.http_server`): a client that sends half a delivery and
    stalls holds no socket and no handler for longer."""

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | Any, mode: str | None = None) -> WebhookSettings:
        """From the typed ``promotion`` block (or the params document holding it)."""
        cfg = params_block(params, "promotion").webhook
        secret_env = cfg.secret_env
        secret = os.environ.get(secret_env, "")
        if not secret:
            raise UserError(
                f"the webhook receiver needs the HMAC secret shared with MLflow in ${secret_env} "
                "(promotion.webhook.secret_env in params.yaml); unsigned requests are refused"
            )
        chosen = str(mode or cfg.mode)
        if chosen not in (EMBEDDED, AIRFLOW):
            raise UserError(f"promotion.webhook.mode {chosen!r}: expected '{EMBEDDED}' or '{AIRFLOW}'")

        numbers: dict[str, Any] = {}
        for key, default, kind in (
            ("max_body_bytes", 65_536, int),
            ("tolerance_s", 300, int),
            ("retry_s", 30.0, float),
            ("read_timeout_s", DEFAULT_READ_TIMEOUT_S, float),
        ):
            try:
                numbers[key] = kind(cfg.get(key, default))
            except (TypeError, ValueError):
                raise UserError(f"promotion.webhook.{key} {cfg.get(key)!r}: expected a number") from None
            if not numbers[key] > 0:
                raise UserError(f"promotion.webhook.{key} {numbers[key]!r}: expected a positive number")
        return cls(
            mode=chosen,
            secret=secret,
            airflow_url=os.environ.get(airflow_api.URL_ENV) or str(cfg.get("airflow_url") or "http://localhost:8080"),
            airflow_token=os.environ.get(str(cfg.get("airflow_token_env") or "RLOPS_AIRFLOW_TOKEN")) or None,
            airflow_credentials=os.environ.get(airflow_api.CREDENTIALS_ENV) or None,
            dag_id=str(cfg.get("dag_id") or "promote__{scenario}"),
            state_db=resolve_local(str(cfg.get("state_db") or "rlops-data/webhook.db")),
            **numbers,
        )
