"""What the webhook receiver does with one verified ``model_version_alias.created`` event
(:func:`handle_event`), and the one log line that says it (:func:`decision_line`).

* ``challenger`` on ``<scenario>-policy`` set outside rlops → the gated promotion of that version,
  in this process (``embedded``) or by the pack's promotion DAG (``airflow``: triggered through
  Airflow 3's REST API, the version tagged with the run; a request Airflow does not accept is kept
  in the receiver's store and retried — :func:`deliver_to_airflow`);
* ``champion`` set outside rlops → :func:`~rlops.pipeline_steps.promotion.flow.check_champion`;
* ``previous`` set outside rlops → put back where rlops left it (:func:`revert_alias`).

An alias move rlops made itself (its signed record, :mod:`~rlops.registry.alias_records`) is
ignored, and so is any alias rlops does not serve from.
"""

from __future__ import annotations

import logging
import time
import urllib.error
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from rlops.common import airflow_api
from rlops.common.redact import redact
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.promotion.flow import check_champion, promote_from_alias
from rlops.pipeline_steps.promotion.guard import UI_REQUEST
from rlops.pipeline_steps.promotion.webhook_settings import AIRFLOW, WebhookSettings
from rlops.registry import tags as T
from rlops.registry.client import CHALLENGER, CHAMPION, PREVIOUS, TrackingError

if TYPE_CHECKING:
    from rlops.pipeline_steps.promotion.webhook_store import WebhookStore

log = logging.getLogger(__name__)
POLICY_SUFFIX = "-policy"


def event_problem(event: Any) -> str | None:
    """None when ``event`` is a well-formed ``model_version_alias.created`` payload, else what is wrong."""
    if not isinstance(event, dict):
        kind = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(event), "null")
        return f"the body must be a JSON object, not a JSON {kind}"
    data = event.get("data")
    if not isinstance(data, dict):
        return "the event's 'data' must be an object with 'name', 'alias' and 'version'"
    for key in ("name", "alias", "version"):
        value = data.get(key)
        if not isinstance(value, (str, int)) or isinstance(value, bool) or len(str(value)) > 256:
            return f"the event's data.{key} must be a string of at most 256 characters"
    return None


def handle_event(
    params: Mapping[str, Any],
    settings: WebhookSettings,
    event: Mapping[str, Any],
    context_for: Callable[[str], StepContext] | None = None,
    store: WebhookStore | None = None,
    delivery_id: str = "",
) -> dict[str, Any]:
    """Act on one verified ``model_version_alias.created`` payload; returns what was done."""
    problem = event_problem(event)
    if problem:
        return {"action": "ignored", "reason": problem}
    data = event["data"]
    name, alias, version = str(data["name"]), str(data["alias"]), str(data["version"])
    if not name.endswith(POLICY_SUFFIX) or alias not in (CHALLENGER, CHAMPION, PREVIOUS):
        return {"action": "ignored", "reason": f"{alias!r} on {name!r} is not an alias rlops serves from"}
    scenario = name[: -len(POLICY_SUFFIX)]
    ctx = context_for(scenario) if context_for else StepContext.create(scenario, params=dict(params))
    if ctx.tracker.alias_written_by_rlops(name, alias) == version:
        return {"action": "ignored", "reason": f"{alias} → v{version} was rlops' own move"}
    if alias == PREVIOUS:
        return revert_alias(ctx, name, alias, version)
    if alias == CHAMPION:
        return {**check_champion(ctx).to_dict(), "check": "champion", "version": version}
    if settings.mode == AIRFLOW:
        # The pack's promotion DAG takes its reward function from the pack's params.
        conf = {"scenario": scenario, "candidate": version, "requested_by": UI_REQUEST}
        return deliver_to_airflow(ctx, settings, store, delivery_id or f"direct-{time.time_ns()}", conf)
    return {"action": "promotion", **promote_from_alias(ctx, version, requested_by=UI_REQUEST).as_dict()}


def revert_alias(ctx: StepServices, name: str, alias: str, version: str) -> dict[str, Any]:
    """Put an alias set outside rlops back where rlops left it (or remove it)."""
    recorded = ctx.tracker.alias_written_by_rlops(name, alias)
    if ctx.dry_run:
        return {"action": f"would_revert_{alias}", "version": version, "reason": "dry run"}
    if recorded is not None:
        ctx.tracker.set_alias(name, alias, recorded)
    else:
        ctx.tracker.delete_alias(name, alias)
    reason = (
        f"the alias {alias!r} was set to v{version} outside rlops; put back to "
        f"{'v' + recorded if recorded else 'no version'} (rlops moves {alias!r} itself)"
    )
    log.warning("%s: %s", name, reason)
    return {"action": f"reverted_{alias}", "version": version, "restored": recorded, "reason": reason}


def decision_line(event: Mapping[str, Any], out: Mapping[str, Any]) -> str:
    """One log line per decision: model, version, alias, verdict and the failing gates."""
    data = event.get("data") if isinstance(event, Mapping) else None
    data = data if isinstance(data, Mapping) else {}
    nested = out.get("promotion")
    promotion: Mapping[str, Any] = nested if isinstance(nested, Mapping) else {}
    verdict = out.get("outcome") or promotion.get("outcome") or out.get("action") or "?"
    failing = list(out.get("failed_gates") or promotion.get("failed_gates") or [])
    if out.get("action") == "dag_triggered":  # the DAG run judges; "none failing" would be a claim
        gates = f"gates judged by the promotion DAG run {out.get('dag_run_id', '?')}"
    elif failing or "passed" in out or "passed" in promotion:
        gates = f"failing gates: {', '.join(failing) or 'none'}"
    else:
        gates = "no gates judged"
    line: str = redact(
        f"webhook decision: {data.get('name', '?')} v{data.get('version', '?')} alias "
        f"{data.get('alias', '?')!s} → {verdict}; {gates}; {str(out.get('reason') or '')[:300]}"
    )
    return line


# --------------------------------------------------------------------------- airflow mode
def trigger_promotion_dag(settings: WebhookSettings, conf: Mapping[str, Any], timeout_s: float = 10.0) -> str:
    """Start a run of the promotion DAG through Airflow 3's REST API; returns its dag_run_id."""
    dag_id = settings.dag_id.format(scenario=conf.get("scenario", ""))  # one promotion DAG per pack
    return _airflow(settings, timeout_s).trigger(dag_id, dict(conf))


_CLIENTS: dict[tuple[str, str | None, str | None, float], airflow_api.AirflowApi] = {}


def _airflow(settings: WebhookSettings, timeout_s: float) -> airflow_api.AirflowApi:
    """One client per Airflow and credentials: its token is reused until it is about to expire."""
    key = (settings.airflow_url, settings.airflow_credentials, settings.airflow_token, timeout_s)
    if key not in _CLIENTS:
        if settings.airflow_credentials:
            user, password = airflow_api.read_credentials(settings.airflow_credentials)
            _CLIENTS[key] = airflow_api.AirflowApi(settings.airflow_url, user, password, timeout_s=timeout_s)
        else:
            _CLIENTS[key] = airflow_api.AirflowApi(
                settings.airflow_url, token=settings.airflow_token, timeout_s=timeout_s
            )
    return _CLIENTS[key]


def deliver_to_airflow(
    ctx: StepServices, settings: WebhookSettings, store: WebhookStore | None, delivery_id: str, conf: Mapping[str, Any]
) -> dict[str, Any]:
    """Trigger the promotion DAG; when Airflow does not accept it, keep the request (``store``) and
    say so on the version. The outcome tag is written last."""
    name, version = f"{conf['scenario']}{POLICY_SUFFIX}", str(conf["candidate"])
    try:
        run_id = trigger_promotion_dag(settings, conf)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        error = redact(f"{type(exc).__name__}: {exc}")
        if store is None:
            raise
        store.keep(delivery_id, conf, error, settings.retry_s)
        reason = (
            f"Airflow ({redact(settings.airflow_url)}) did not accept the request: {error}; kept, "
            f"retried every {settings.retry_s:g} s until delivered"
        )
        _tag_quietly(
            ctx,
            name,
            version,
            {
                T.PROMOTION_REQUESTED_BY: UI_REQUEST,
                T.PROMOTION_REASON: reason,
                T.PROMOTION_OUTCOME: T.OUTCOME_REQUESTED,
            },
        )
        return {"action": "kept", "version": version, "reason": reason}
    if store is not None:
        store.delivered(delivery_id)
    dag_id = settings.dag_id.format(scenario=conf["scenario"])
    _tag_quietly(
        ctx,
        name,
        version,
        {
            T.PROMOTION_REQUESTED_BY: UI_REQUEST,
            T.PROMOTION_REASON: f"promotion DAG {dag_id} run {run_id} triggered",
            T.PROMOTION_OUTCOME: T.OUTCOME_REQUESTED,
        },
    )
    return {"action": "dag_triggered", "dag_run_id": run_id, "version": version}


def _tag_quietly(ctx: StepServices, name: str, version: str, tags: Mapping[str, str]) -> None:

    try:
        ctx.tracker.set_model_version_tags(name, version, tags)
    except TrackingError as exc:
        log.warning("%s v%s: writing the request's tags failed: %s", name, version, redact(str(exc)))
