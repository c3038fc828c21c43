"""Promotion from the MLflow UI, still gated: the receiver of MLflow's model-registry webhooks.

MLflow (3.3+, SQL backend) calls a registered webhook on ``model_version_alias.created`` with a
Standard-Webhooks style HMAC-SHA256 signature (``X-MLflow-Signature: v1,<base64>`` over
``<delivery id>.<timestamp>.<body>``). This app checks the signature and the timestamp, answers
202 at once (MLflow waits at most ``MLFLOW_WEBHOOK_REQUEST_TIMEOUT`` seconds) and then, one
event at a time:

* ``challenger`` on ``<scenario>-policy`` set outside rlops → the gated promotion of that version:
  ``embedded`` mode runs it in this process (:func:`~rlops.pipeline_steps.promotion.guard.promote_from_alias`),
  ``airflow`` mode triggers the ``promote`` DAG through Airflow 3's REST API
  (``POST /api/v2/dags/promote/dagRuns``) and tags the version with the DAG run id;
* ``champion`` set outside rlops → :func:`~rlops.pipeline_steps.promotion.guard.check_champion`.

Events rlops caused itself (its own alias moves) are recognised by the ``rlops.alias.<alias>``
registered-model tag and ignored, so a promotion never triggers itself.

Serve it with ``rlops model webhook serve`` and register it with ``rlops model webhook register``;
MLflow refuses ``http`` and private addresses by default, see the README (MLflow as the cockpit).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

    from rlops.pipeline_steps.infra.context import StepContext

log = logging.getLogger(__name__)

SIGNATURE_HEADER, TIMESTAMP_HEADER, DELIVERY_HEADER = "X-MLflow-Signature", "X-MLflow-Timestamp", "X-MLflow-Delivery-Id"
EVENTS = ("model_version_alias.created",)
POLICY_SUFFIX = "-policy"
EMBEDDED, AIRFLOW = "embedded", "airflow"


# --------------------------------------------------------------------------- signature
def sign(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """MLflow's webhook signature: ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``."""
    content = f"{delivery_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha256).digest()).decode()


def verify(secret: str, headers: Mapping[str, str], body: bytes, tolerance_s: int = 300,
           now: float | None = None) -> str | None:
    """None when the request is signed with ``secret`` and recent, else what is wrong."""
    sig, ts, did = (headers.get(h) or headers.get(h.lower()) for h in
                    (SIGNATURE_HEADER, TIMESTAMP_HEADER, DELIVERY_HEADER))
    if not (sig and ts and did):
        return "missing signature, timestamp or delivery id header"
    try:
        age = abs((now if now is not None else time.time()) - int(ts))
    except ValueError:
        return f"timestamp {ts!r} is not a Unix time"
    if age > tolerance_s:
        return f"timestamp is {age:.0f} s away from now (tolerance {tolerance_s} s): a replay?"
    expected = sign(secret, did, ts, body)
    if not any(hmac.compare_digest(expected, s) for s in sig.split()):
        return "signature does not match the shared secret"
    return None


# --------------------------------------------------------------------------- settings and dispatch
@dataclass(frozen=True)
class WebhookSettings:
    """The ``promotion.webhook`` block of params, with the secret and token read from the env."""

    mode: str
    secret: str
    airflow_url: str
    airflow_token: str | None
    dag_id: str

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | Any, mode: str | None = None) -> WebhookSettings:
        """From the typed ``promotion`` block (or the params document holding it)."""
        from rlops.common.errors import UserError
        from rlops.common.params_sources import params_block
        cfg = params_block(params, "promotion").webhook
        secret_env = cfg.secret_env
        secret = os.environ.get(secret_env, "")
        if not secret:
            raise UserError(f"the webhook receiver needs the HMAC secret shared with MLflow in ${secret_env} "
                            "(promotion.webhook.secret_env in params.yaml); unsigned requests are refused")
        chosen = str(mode or cfg.mode)
        if chosen not in (EMBEDDED, AIRFLOW):
            raise UserError(f"promotion.webhook.mode {chosen!r}: expected '{EMBEDDED}' or '{AIRFLOW}'")
        return cls(mode=chosen, secret=secret, airflow_url=cfg.airflow_url,
                   airflow_token=os.environ.get(cfg.airflow_token_env) or None, dag_id=cfg.dag_id)


def trigger_promotion_dag(settings: WebhookSettings, conf: Mapping[str, Any], timeout_s: float = 10.0) -> str:
    """Start a run of the promotion DAG through Airflow 3's REST API; returns its dag_run_id."""
    url = f"{settings.airflow_url.rstrip('/')}/api/v2/dags/{settings.dag_id}/dagRuns"
    body = json.dumps({"logical_date": None, "conf": dict(conf)}).encode()
    headers = {"Content-Type": "application/json"}
    if settings.airflow_token:
        headers["Authorization"] = f"Bearer {settings.airflow_token}"
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - configured URL
        return str(json.loads(resp.read() or b"{}").get("dag_run_id", ""))


def handle_event(params: Mapping[str, Any], settings: WebhookSettings, event: Mapping[str, Any],
                 context_for: Callable[[str], StepContext] | None = None) -> dict[str, Any]:
    """Act on one verified ``model_version_alias.created`` payload; returns what was done."""
    from rlops.pipeline_steps.infra import tags as T
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.registry import CHALLENGER, CHAMPION
    from rlops.pipeline_steps.promotion.guard import UI_REQUEST, check_champion, promote_from_alias
    data = event.get("data") or {}
    name, alias, version = str(data.get("name", "")), str(data.get("alias", "")), str(data.get("version", ""))
    if not name.endswith(POLICY_SUFFIX) or alias not in (CHALLENGER, CHAMPION):
        return {"action": "ignored", "reason": f"{alias!r} on {name!r} is not a policy promotion alias"}
    scenario = name[: -len(POLICY_SUFFIX)]
    ctx = context_for(scenario) if context_for else StepContext.create(scenario, params=dict(params))
    if ctx.tracker.alias_written_by_rlops(name, alias) == version:
        return {"action": "ignored", "reason": f"{alias} → v{version} was rlops' own move"}
    if alias == CHAMPION:
        return {"action": "champion_check", **check_champion(ctx).to_dict()}
    if settings.mode == AIRFLOW:
        conf = {"scenario": scenario, "candidate": version, "requested_by": UI_REQUEST,
                "reward_fn": ctx.reward_choice().reward_fn}
        run_id = trigger_promotion_dag(settings, conf)
        ctx.tracker.set_model_version_tags(name, version, {
            T.PROMOTION_REQUESTED_BY: UI_REQUEST,
            T.PROMOTION_REASON: f"promotion DAG {settings.dag_id} run {run_id} triggered",
            T.PROMOTION_OUTCOME: "requested"})  # the outcome tag last
        return {"action": "dag_triggered", "dag_run_id": run_id, "version": version}
    return {"action": "promotion", **promote_from_alias(ctx, version, requested_by=UI_REQUEST)}


# --------------------------------------------------------------------------- app
class Receiver:
    """Runs verified events one at a time in a background thread and keeps their outcomes."""

    def __init__(self, params: Mapping[str, Any], settings: WebhookSettings,
                 context_for: Callable[[str], StepContext] | None = None) -> None:
        self.params, self.settings, self.context_for = params, settings, context_for
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlops-webhook")
        self.outcomes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def submit(self, delivery_id: str, event: Mapping[str, Any]) -> Future[None]:
        def run() -> None:
            try:
                out = handle_event(self.params, self.settings, event, self.context_for)
            except Exception as exc:  # noqa: BLE001 - kept for /outcomes and the log; the server lives on
                log.exception("webhook delivery %s failed", delivery_id)
                out = {"action": "error", "reason": f"{type(exc).__name__}: {exc}"}
            with self._lock:
                self.outcomes[delivery_id] = out
        return self.pool.submit(run)


def create_app(params: Mapping[str, Any], settings: WebhookSettings,
               context_for: Callable[[str], StepContext] | None = None) -> FastAPI:
    """The receiver: ``POST /mlflow/webhook`` (MLflow's deliveries), ``GET /healthz``,
    ``GET /outcomes/{delivery_id}``."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse

    receiver = Receiver(params, settings, context_for)
    app = FastAPI(title="rlops promotion webhook")
    app.state.receiver = receiver

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok", "mode": settings.mode}

    async def webhook(request):  # type: ignore[no-untyped-def] - annotated below, for FastAPI
        body = await request.body()
        problem = verify(settings.secret, request.headers, body)
        if problem:
            raise HTTPException(status_code=401, detail=problem)
        try:
            event = json.loads(body)
        except json.JSONDecodeError as exc:
            raise HTTPException(status_code=400, detail=f"body is not JSON: {exc}") from None
        delivery = request.headers.get(DELIVERY_HEADER, "")
        if (event.get("entity"), event.get("action")) != ("model_version_alias", "created"):
            return JSONResponse({"accepted": False, "reason": "event not handled"}, status_code=200)
        receiver.submit(delivery, event)
        return JSONResponse({"accepted": True, "delivery_id": delivery}, status_code=202)

    # Real classes, not the strings ``from __future__ import annotations`` leaves: FastAPI resolves
    # annotations in this module's globals, where the lazily imported Request is not.
    webhook.__annotations__ = {"request": Request, "return": JSONResponse}
    app.add_api_route("/mlflow/webhook", webhook, methods=["POST"])

    @app.get("/outcomes/{delivery_id}")
    def outcome(delivery_id: str) -> dict[str, Any]:
        if delivery_id not in receiver.outcomes:
            raise HTTPException(status_code=404, detail="no outcome (yet) for this delivery")
        return receiver.outcomes[delivery_id]

    return app


def register_webhook(tracking_uri: str, url: str, secret: str, name: str = "rlops-promotion") -> str:
    """Create (or update) the MLflow webhook that calls this receiver; returns its id. Needs an
    MLflow server with a SQL backend that accepts ``url`` (see the README for the settings)."""
    from mlflow import MlflowClient
    client = MlflowClient(tracking_uri=tracking_uri)
    for hook in client.list_webhooks():
        if hook.name == name:
            return str(client.update_webhook(hook.webhook_id, url=url, events=list(EVENTS), secret=secret,
                                             status="ACTIVE").webhook_id)
    return str(client.create_webhook(name=name, url=url, events=list(EVENTS), secret=secret,
                                     description="rlops: gated promotion when `challenger` is set in the UI; "
                                                 "hand-set `champion` check").webhook_id)


# --------------------------------------------------------------------------- command handlers
def serve(host: str, port: int, mode: str | None = None) -> int:
    """Serve the receiver until interrupted (``rlops model webhook serve``)."""
    import uvicorn

    from rlops.common.config import load_params
    params = load_params()
    app = create_app(params, WebhookSettings.from_params(params, mode))
    uvicorn.run(app, host=host, port=int(port), log_level="info")
    return 0


def register(url: str, tracking_uri: str | None = None) -> str:
    """Create or update the MLflow webhook pointing at ``url``; returns its id."""
    from rlops.common.config import load_params
    params = load_params()
    settings = WebhookSettings.from_params(params)
    from rlops.common.params_sources import params_block
    uri = tracking_uri or params_block(params, "tracking").uri
    return str(register_webhook(uri, url, settings.secret))
