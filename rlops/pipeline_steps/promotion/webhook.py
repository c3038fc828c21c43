"""Promotion from the MLflow UI, still gated: the receiver of MLflow's model-registry webhooks.

MLflow (3.3+, SQL backend) calls a registered webhook on ``model_version_alias.created`` with a
Standard-Webhooks style HMAC-SHA256 signature (``X-MLflow-Signature: v1,<base64>`` over
``<delivery id>.<timestamp>.<body>``). This app checks the signature and the timestamp, answers
202 at once (MLflow waits at most ``MLFLOW_WEBHOOK_REQUEST_TIMEOUT`` seconds) and then, one
event at a time:

* ``challenger`` on ``<scenario>-policy`` set outside rlops → the gated promotion of that version:
  ``embedded`` mode runs it in this process (:func:`~rlops.pipeline_steps.promotion.flow.promote_from_alias`),
  ``airflow`` mode triggers the ``promote`` DAG through Airflow 3's REST API
  (``POST /api/v2/dags/promote__<pack>/dagRuns``) and tags the version with the DAG run id;
* ``champion`` set outside rlops → :func:`~rlops.pipeline_steps.promotion.flow.check_champion`.

* ``previous`` set outside rlops → put back where rlops left it (rollback only ever returns to a
  version rlops itself replaced).

Events rlops caused itself (its own alias moves) are recognised by rlops' *signed* record of the
move (:mod:`~rlops.registry.alias_records`) and ignored, so a promotion never
triggers itself; a record written in the UI does not carry the signature and counts for nothing.
A receiver whose registry key is not the deployment's acts on no event: the delivery fails with
:class:`~rlops.registry.alias_records.RegistryKeyMismatch`, logged and kept for
``/outcomes``, and every alias stays as it was.

Hostile input: the body is capped (``max_body_bytes``) before it is read whole; a body that is not
a JSON object with string ``name``/``alias``/``version`` is a 400; each signed delivery id is
accepted once (:class:`~rlops.pipeline_steps.promotion.webhook_store.WebhookStore`: a replay is a
409); nothing a response or ``/outcomes/<id>`` carries shows a credential (URIs are redacted). In
``airflow`` mode a request Airflow did not accept is kept and retried until it is delivered. Each
decision is logged in one line: model, version, alias, verdict, failing gates. A delivery that fails
is logged in one redacted line as well, without the chain of its causes (MLflow's and urllib3's own
errors name the tracking URI with its credentials). A header that cannot be a timestamp or a
signature (a number too large for a float, non-ASCII bytes) is a 401 like any unsigned request. A
connection whose delivery has not arrived whole ``read_timeout_s`` after the receiver began waiting
for it is closed (:mod:`rlops.common.http_server`), however slowly its bytes trickle in.

Serve it with ``rlops model webhook serve`` and register it with ``rlops model webhook register``;
MLflow refuses ``http`` and private addresses by default, see docs/mlflow.md.
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
import urllib.error
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlops.common import airflow_api
from rlops.common.config import load_params, resolve_local
from rlops.common.errors import UserError
from rlops.common.http_server import DEFAULT_READ_TIMEOUT_S
from rlops.common.http_server import serve as serve_http
from rlops.common.params_sources import params_block
from rlops.common.redact import redact
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.promotion.flow import check_champion, promote_from_alias
from rlops.pipeline_steps.promotion.guard import UI_REQUEST
from rlops.pipeline_steps.promotion.webhook_store import WebhookStore
from rlops.registry import tags as T
from rlops.registry.client import CHALLENGER, CHAMPION, PREVIOUS, TrackingError

if TYPE_CHECKING:
    from fastapi import FastAPI
    from mlflow.entities.webhook import WebhookEventStr

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.webhook_store import WebhookStore

log = logging.getLogger(__name__)
MAX_OUTCOMES = 1000

SIGNATURE_HEADER, TIMESTAMP_HEADER, DELIVERY_HEADER = "X-MLflow-Signature", "X-MLflow-Timestamp", "X-MLflow-Delivery-Id"
EVENTS: tuple[WebhookEventStr, ...] = ("model_version_alias.created",)
POLICY_SUFFIX = "-policy"
EMBEDDED, AIRFLOW = "embedded", "airflow"


# --------------------------------------------------------------------------- signature
def sign(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """MLflow's webhook signature: ``v1,`` + base64 HMAC-SHA256 of ``id.timestamp.body``."""
    content = f"{delivery_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(secret.encode(), content, hashlib.sha256).digest()).decode()


def verify(
    secret: str, headers: Mapping[str, str], body: bytes, tolerance_s: int = 300, now: float | None = None
) -> str | None:
    """None when the request is signed with ``secret`` and recent, else what is wrong."""
    sig, ts, did = (
        headers.get(h) or headers.get(h.lower()) for h in (SIGNATURE_HEADER, TIMESTAMP_HEADER, DELIVERY_HEADER)
    )
    if not (sig and ts and did):
        return "missing signature, timestamp or delivery id header"
    try:
        age = abs((now if now is not None else time.time()) - int(ts))
    except (ValueError, OverflowError):  # a number of hundreds of digits does not fit a float
        return f"timestamp {ts[:40]!r} is not a Unix time"
    if age > tolerance_s:
        return f"timestamp is {age:.0f} s away from now (tolerance {tolerance_s} s): a replay?"
    expected = sign(secret, did, ts, body)
    # compare_digest raises on non-ASCII text; a signature of ours is base64, so such a one is wrong
    if not any(s.isascii() and hmac.compare_digest(expected, s) for s in sig.split()):
        return "signature does not match the shared secret"
    return None


def failure_line(exc: BaseException) -> str:
    """A failed delivery as one redacted line: the error without its chain, whose MLflow and
    urllib3 causes carry the tracking URI with its credentials."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    line: str = redact(text if len(text) <= 2000 else text[:2000] + "…")
    return line


# --------------------------------------------------------------------------- settings and dispatch
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


def revert_alias(ctx: StepContext, name: str, alias: str, version: str) -> dict[str, Any]:
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


def deliver_to_airflow(
    ctx: StepContext, settings: WebhookSettings, store: WebhookStore | None, delivery_id: str, conf: Mapping[str, Any]
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


def _tag_quietly(ctx: StepContext, name: str, version: str, tags: Mapping[str, str]) -> None:

    try:
        ctx.tracker.set_model_version_tags(name, version, tags)
    except TrackingError as exc:
        log.warning("%s v%s: writing the request's tags failed: %s", name, version, redact(str(exc)))


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


# --------------------------------------------------------------------------- app
class Receiver:
    """Runs verified events one at a time in a background thread and keeps their outcomes; in
    ``airflow`` mode it also retries the requests Airflow did not accept yet."""

    def __init__(
        self,
        params: Mapping[str, Any],
        settings: WebhookSettings,
        context_for: Callable[[str], StepContext] | None = None,
        store: WebhookStore | None = None,
    ) -> None:

        self.params, self.settings, self.context_for = params, settings, context_for
        self.store = store or WebhookStore(settings.state_db, keep_s=max(3600.0, 4.0 * settings.tolerance_s))
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlops-webhook")
        self.outcomes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if settings.mode == AIRFLOW:
            threading.Thread(target=self._retry_loop, name="rlops-webhook-retry", daemon=True).start()

    def _record(self, delivery_id: str, out: dict[str, Any]) -> None:
        with self._lock:
            self.outcomes[delivery_id] = redact(out)
            while len(self.outcomes) > MAX_OUTCOMES:
                self.outcomes.pop(next(iter(self.outcomes)))

    def submit(self, delivery_id: str, event: Mapping[str, Any]) -> Future[None]:
        def run() -> None:
            try:
                out = handle_event(self.params, self.settings, event, self.context_for, self.store, delivery_id)
            except Exception as exc:  # noqa: BLE001 - kept for /outcomes and the log; the server lives on
                reason = failure_line(exc)
                log.error("webhook delivery %s failed: %s", redact(delivery_id), reason)
                out = {"action": "error", "reason": reason}
            log.info("%s", decision_line(event, out).replace("\n", " "))
            self._record(delivery_id, out)

        return self.pool.submit(run)

    def retry_pending(self) -> list[dict[str, Any]]:
        """Try once more every kept request that is due (the retry thread calls this)."""
        done = []
        for req in self.store.due():
            conf = req.payload
            scenario = str(conf.get("scenario"))
            ctx = (
                self.context_for(scenario)
                if self.context_for
                else StepContext.create(scenario, params=dict(self.params))
            )
            out = deliver_to_airflow(ctx, self.settings, self.store, req.delivery_id, conf)
            event = {
                "data": {"name": f"{scenario}{POLICY_SUFFIX}", "alias": "challenger", "version": conf.get("candidate")}
            }
            log.info(
                "%s", decision_line(event, {**out, "reason": f"retry {req.attempts + 1}: {out.get('reason', '')}"})
            )
            self._record(req.delivery_id, out)
            done.append(out)
        return done

    def _retry_loop(self) -> None:
        while not self._stop.wait(self.settings.retry_s):
            try:
                self.pool.submit(self.retry_pending).result()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.error("retrying kept promotion requests failed: %s", failure_line(exc))

    def close(self) -> None:
        self._stop.set()
        self.pool.shutdown(wait=False)


async def read_capped(request: Any, limit: int) -> bytes:
    """The request body, refused (413) once it grows past ``limit`` bytes — before it is read whole."""
    from fastapi import HTTPException

    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise HTTPException(status_code=400, detail="Content-Length is not a number") from None
        if size > limit:
            raise HTTPException(status_code=413, detail=f"body of {size} bytes is over the {limit}-byte limit")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise HTTPException(status_code=413, detail=f"body is over the {limit}-byte limit")
    return bytes(body)


def create_app(
    params: Mapping[str, Any],
    settings: WebhookSettings,
    context_for: Callable[[str], StepContext] | None = None,
    store: WebhookStore | None = None,
) -> FastAPI:
    """The receiver: ``POST /mlflow/webhook`` (MLflow's deliveries), ``GET /healthz``,
    ``GET /outcomes/{delivery_id}``."""
    from fastapi import FastAPI, HTTPException, Request
    from fastapi.responses import JSONResponse

    receiver = Receiver(params, settings, context_for, store)
    app = FastAPI(title="rlops promotion webhook", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.receiver = receiver

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"status": "ok", "mode": settings.mode, "pending": len(receiver.store.pending())}

    async def webhook(request):  # type: ignore[no-untyped-def]  # annotated below, for FastAPI
        body = await read_capped(request, settings.max_body_bytes)
        problem = verify(settings.secret, request.headers, body, settings.tolerance_s)
        if problem:
            raise HTTPException(status_code=401, detail=problem)
        try:
            event = json.loads(body)
        except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, or nested past the parser's stack
            raise HTTPException(status_code=400, detail=f"body is not a JSON document: {type(exc).__name__}") from None
        if not isinstance(event, dict):
            raise HTTPException(status_code=400, detail=event_problem(event))
        delivery = request.headers.get(DELIVERY_HEADER, "")
        if (event.get("entity"), event.get("action")) != ("model_version_alias", "created"):
            return JSONResponse({"accepted": False, "reason": "event not handled"}, status_code=200)
        problem = event_problem(event)
        if problem:
            raise HTTPException(status_code=400, detail=problem)
        if not receiver.store.first_time(delivery):
            log.warning("webhook delivery %s refused: already received (a replay)", redact(delivery))
            raise HTTPException(status_code=409, detail="this delivery id was already received: replay refused")
        receiver.submit(delivery, event)
        return JSONResponse({"accepted": True, "delivery_id": delivery}, status_code=202)

    # Real classes, not the strings ``from __future__ import annotations`` leaves: FastAPI resolves
    # annotations in this module's globals, where the lazily imported Request is not.
    webhook.__annotations__ = {"request": Request, "return": JSONResponse}
    app.add_api_route("/mlflow/webhook", webhook, methods=["POST"])

    @app.get("/outcomes/{delivery_id}")
    def outcome(delivery_id: str) -> dict[str, Any]:
        with receiver._lock:
            found = receiver.outcomes.get(delivery_id)
        if found is None:
            raise HTTPException(status_code=404, detail="no outcome (yet) for this delivery")
        return found

    return app


def register_webhook(tracking_uri: str, url: str, secret: str, name: str = "rlops-promotion") -> str:
    """Create (or update) the MLflow webhook that calls this receiver; returns its id. Needs an
    MLflow server with a SQL backend that accepts ``url`` (see docs/mlflow.md for the settings)."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    for hook in client.list_webhooks():
        if hook.name == name:
            return str(
                client.update_webhook(
                    hook.webhook_id, url=url, events=list(EVENTS), secret=secret, status="ACTIVE"
                ).webhook_id
            )
    return str(
        client.create_webhook(
            name=name,
            url=url,
            events=list(EVENTS),
            secret=secret,
            description="rlops: gated promotion when `challenger` is set in the UI; hand-set `champion` check",
        ).webhook_id
    )


# --------------------------------------------------------------------------- command handlers
def serve(host: str, port: int, mode: str | None = None) -> int:
    """Serve the receiver until interrupted (``rlops model webhook serve``)."""
    params = load_params()
    if not log.handlers and not logging.getLogger().handlers:  # one line per decision on stderr
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log.setLevel(logging.INFO)
    settings = WebhookSettings.from_params(params, mode)
    serve_http(create_app(params, settings), host, int(port), "info", settings.read_timeout_s)
    return 0


def register(url: str, tracking_uri: str | None = None) -> str:
    """Create or update the MLflow webhook pointing at ``url``; returns its id."""
    params = load_params()
    settings = WebhookSettings.from_params(params)

    uri = tracking_uri or params_block(params, "tracking").uri
    return str(register_webhook(uri, url, settings.secret))
