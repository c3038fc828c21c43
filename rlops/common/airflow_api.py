"""A small client of Airflow 3's public REST API (``/api/v2``) whose token renews itself.

Airflow's simple auth manager hands out JWTs (``POST /auth/token``) that expire after
``[api_auth] jwt_expiration_time`` (a day by default): a process that keeps one token — the webhook
receiver, a task that checks its pool — stops working a day after it started. This client holds the
credentials instead (user and password, from a credentials file the stack writes once, or from the
environment) and fetches a fresh token when the one it has is about to expire or is refused (401).
A fixed token (``RLOPS_AIRFLOW_TOKEN``) still works for deployments that hand one out, without renewal.

Standard library only: the agent side and the task processes import it.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlops.common.errors import InfrastructureError, UserError

URL_ENV = "RLOPS_AIRFLOW_URL"
CREDENTIALS_ENV = "RLOPS_AIRFLOW_CREDENTIALS"
TOKEN_ENV = "RLOPS_AIRFLOW_TOKEN"
RENEW_BEFORE_S = 300.0
"""A token is renewed this long before it expires: a request never leaves with one about to lapse."""


def token_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (seconds since the epoch), read without verifying it — only
    to know when to ask for a new one; None when the token carries none."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["exp"]) if isinstance(claims, dict) and "exp" in claims else None
    except (IndexError, ValueError, KeyError, TypeError):
        return None


def read_credentials(path: str | os.PathLike[str]) -> tuple[str, str]:
    """``(username, password)`` from a JSON file ``{"username": …, "password": …}``."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(
            f"Airflow credentials file {p} does not exist: expected the file `rlops stack up` writes"
        ) from None
    except (OSError, ValueError) as exc:
        raise UserError(f"Airflow credentials file {p} is not readable JSON: {exc}") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("username"), str) and isinstance(doc.get("password"), str)):
        raise UserError(f"Airflow credentials file {p}: expected a JSON object with string 'username' and 'password'")
    return doc["username"], doc["password"]


@dataclass
class AirflowApi:
    """``base_url`` (``http://127.0.0.1:8080``) with either credentials (renewed tokens) or a fixed token."""

    base_url: str
    username: str | None = None
    password: str | None = None
    token: str | None = None
    timeout_s: float = 10.0
    _expires: float | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_env(cls, base_url: str | None = None, timeout_s: float = 10.0) -> AirflowApi | None:
        """The client the environment describes (``RLOPS_AIRFLOW_URL`` and ``RLOPS_AIRFLOW_CREDENTIALS``
        or ``RLOPS_AIRFLOW_TOKEN``), or None when no Airflow URL is known."""
        url = base_url or os.environ.get(URL_ENV)
        if not url:
            return None
        creds = os.environ.get(CREDENTIALS_ENV)
        if creds:
            user, password = read_credentials(creds)
            return cls(url, username=user, password=password, timeout_s=timeout_s)
        return cls(url, token=os.environ.get(TOKEN_ENV) or None, timeout_s=timeout_s)

    # ------------------------------------------------------------------ tokens
    def _fresh_token(self) -> str | None:
        """The token to send: a new one when the held one expires within ``RENEW_BEFORE_S``."""
        if self.username is None:
            return self.token
        with self._lock:
            if self.token is None or (self._expires is not None and self._expires - time.time() < RENEW_BEFORE_S):
                self._login()
            return self.token

    def _login(self) -> None:
        body = json.dumps({"username": self.username, "password": self.password}).encode()
        out = self._send("POST", "/auth/token", body, token=None)
        token = out.get("access_token") if isinstance(out, dict) else None
        if not isinstance(token, str):
            raise InfrastructureError(f"Airflow at {self.base_url} answered /auth/token without an access_token")
        self.token, self._expires = token, token_expiry(token)

    # ------------------------------------------------------------------ requests
    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One call (``path`` like ``/api/v2/pools/gpu``); the decoded JSON answer. A 401 renews the
        token once (credentials only); other HTTP errors propagate as ``urllib.error.HTTPError``."""
        data = None if body is None else json.dumps(body).encode()
        try:
            return self._send(method, path, data, token=self._fresh_token())
        except urllib.error.HTTPError as exc:
            if exc.code != 401 or self.username is None:
                raise
            with self._lock:
                self._login()
            return self._send(method, path, data, token=self.token)

    def _send(self, method: str, path: str, data: bytes | None, token: str | None) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        url = self.base_url.rstrip("/") + path
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - configured URL
            raw = resp.read()
        return json.loads(raw) if raw else None

    # ------------------------------------------------------------------ what rlops asks
    def pool_exists(self, name: str) -> bool:
        try:
            self.request("GET", f"/api/v2/pools/{urllib.parse.quote(name, safe='')}")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def trigger(self, dag_id: str, conf: dict[str, Any], run_id: str | None = None) -> str:
        """A manual run of ``dag_id`` with ``conf`` (no logical date: Airflow 3 needs none); its run id."""
        body: dict[str, Any] = {"logical_date": None, "conf": conf}
        if run_id:
            body["dag_run_id"] = run_id
        out = self.request("POST", f"/api/v2/dags/{urllib.parse.quote(dag_id, safe='')}/dagRuns", body)
        return str((out or {}).get("dag_run_id", ""))
