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

This module is the HTTP side; the signature is :mod:`~rlops.pipeline_steps.promotion.webhook_signature`'s,
the settings :mod:`~rlops.pipeline_steps.promotion.webhook_settings`', what an event does
:mod:`~rlops.pipeline_steps.promotion.webhook_events`' and the registration with MLflow
:mod:`rlops.registry.webhooks`'. Serve it with ``rlops model webhook serve`` and register it with
``rlops model webhook register``; MLflow refuses ``http`` and private addresses by default, see
docs/mlflow.md.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from rlops.common.config import load_params
from rlops.common.http_server import serve as serve_http
from rlops.common.params_sources import params_block
from rlops.common.redact import redact
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.promotion.webhook_events import (
    POLICY_SUFFIX,
    decision_line,
    deliver_to_airflow,
    event_problem,
    handle_event,
)
from rlops.pipeline_steps.promotion.webhook_settings import AIRFLOW, WebhookSettings
from rlops.pipeline_steps.promotion.webhook_signature import DELIVERY_HEADER, verify
from rlops.pipeline_steps.promotion.webhook_store import WebhookStore
from rlops.registry.webhooks import register_webhook

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger(__name__)
MAX_OUTCOMES = 1000


def failure_line(exc: BaseException) -> str:
    """A failed delivery as one redacted line: the error without its chain, whose MLflow and
    urllib3 causes carry the tracking URI with its credentials."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    line: str = redact(text if len(text) <= 2000 else text[:2000] + "…")
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
