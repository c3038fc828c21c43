"""The console's web application: read-only GET pages over the registry and the trace store, and
one form, the reward what-if, whose jobs run in the background (:mod:`rlops.console.whatif_jobs`)
and write only to the console's own cache folder.

``create_app(data, token=..., mlflow_ui=...)`` builds a FastAPI app. With a token, every request
must carry it: ``Authorization: Bearer <token>``, the header ``X-Console-Token``, or the cookie
set by visiting any page once with ``?token=<token>`` (compared with ``hmac.compare_digest``).
Unknown scenarios, versions, trace ids and runs answer a styled 404 page; any other error a
styled 500 page without the traceback (it goes to the server log).
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from rlops.common.airflow_api import AirflowApi
from rlops.common.config import resolve_params
from rlops.common.errors import UserError
from rlops.console import format as fmt
from rlops.console import registry_views as rv
from rlops.console import svg
from rlops.console.data import SCENARIO_RE, ProjectData, RegistryUnavailable
from rlops.console.service import NotFound, TraceViews
from rlops.console.whatif_jobs import WhatIfJobs, project_jobs, split_assignments
from rlops.registry.client import ui_url
from rlops.stack.airflow_setup import airflow_problems
from rlops.whatif.compare import format_estimate

log = logging.getLogger(__name__)
HERE = Path(__file__).parent
COOKIE = "rlops_console_token"
TRACE_ID_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,200}$")
VERSION_RE = re.compile(r"^[A-Za-z0-9_.:/\-]{1,128}$")
LABEL_RE = re.compile(r"^v?[A-Za-z0-9_.\-]{1,32}$")
WHATIF_FORM_RE = re.compile(r"^/s/[A-Za-z0-9_\-]{1,100}/whatif$")


class Links:
    """URLs into the MLflow UI for the runs and model versions a page shows."""

    def __init__(self, base: str | None, data: ProjectData) -> None:
        self.base, self.data = (base or "").rstrip("/"), data

    def run(self, scenario: str, run_id: str | None) -> str | None:
        exp = self.data.experiment_id(scenario) if self.base and run_id else None
        return ui_url(self.base, f"experiments/{exp}/runs/{run_id}") if exp else None

    def experiment(self, scenario: str) -> str | None:
        exp = self.data.experiment_id(scenario) if self.base else None
        return ui_url(self.base, f"experiments/{exp}/runs") if exp else None

    def model(self, name: str, version: str | None = None) -> str | None:
        if not self.base:
            return None
        return ui_url(self.base, f"models/{quote(name)}" + (f"/versions/{version}" if version else ""))


def create_app(
    data: ProjectData, token: str | None = None, mlflow_ui: str | None = None, whatif_jobs: WhatIfJobs | None = None
) -> FastAPI:
    app = FastAPI(title="rlops console", docs_url=None, redoc_url=None, openapi_url=None)
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    fmt.install(templates.env)
    links = Links(mlflow_ui, data)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    def page(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        return templates.TemplateResponse(
            request, name, {"links": links, "scenarios": data.scenarios(), **ctx}, status_code=status
        )

    _install_guard(app, token)
    _install_error_pages(app, page)
    _add_trace_routes(app, data, TraceViews(data), page)
    _add_registry_routes(app, data, page)
    _add_whatif_routes(app, data, whatif_jobs or project_jobs(data), page)
    return app


def _install_guard(app: FastAPI, token: str | None) -> None:
    """Read-only (GET/HEAD), but for the what-if form's POST, which must come from the console's own
    pages (its Origin, else its Referer, is this console); with a token, every request must carry it."""

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.method not in ("GET", "HEAD"):
            if request.method != "POST" or not WHATIF_FORM_RE.match(request.url.path):
                return HTMLResponse("read-only console: only GET requests (and the what-if form)", status_code=405)
            if not _same_origin(request):
                return HTMLResponse("the what-if form is accepted from this console's own pages only", 403)
        if token is None:
            return await call_next(request)
        offered = request.query_params.get("token")
        if offered is not None and hmac.compare_digest(offered.encode(), token.encode()):
            target = request.url.remove_query_params("token")
            resp = RedirectResponse(str(target.path) + (f"?{target.query}" if target.query else ""), 303)
            resp.set_cookie(COOKIE, token, httponly=True, samesite="strict")
            return resp
        auth = request.headers.get("authorization", "")
        candidates = [
            auth[7:] if auth.lower().startswith("bearer ") else "",
            request.headers.get("x-console-token", ""),
            request.cookies.get(COOKIE, ""),
        ]
        if any(c and hmac.compare_digest(c.encode(), token.encode()) for c in candidates):
            return await call_next(request)
        return HTMLResponse(
            "<h1>401</h1><p>This console needs its token: open it once with ?token=…</p>", status_code=401
        )


def _same_origin(request: Request) -> bool:
    """The request's Origin (else Referer) is this console's own origin: another site cannot post."""
    from urllib.parse import urlsplit

    claimed = request.headers.get("origin") or request.headers.get("referer") or ""
    parts = urlsplit(claimed)
    host = request.headers.get("host", "")
    return bool(host) and parts.netloc == host and parts.scheme == request.url.scheme


def _install_error_pages(app: FastAPI, page: Callable[..., HTMLResponse]) -> None:
    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> HTMLResponse:
        return page(request, "error.html", 404, code=404, message=str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> HTMLResponse:
        msg = "no such page" if exc.status_code == 404 else str(exc.detail)
        return page(request, "error.html", exc.status_code, code=exc.status_code, message=msg)

    @app.exception_handler(RegistryUnavailable)
    async def registry_down(request: Request, exc: RegistryUnavailable) -> HTMLResponse:
        log.warning("console page %s: %s", request.url.path, exc)
        return page(request, "error.html", 503, code=503, message=str(exc))

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> HTMLResponse:
        log.exception("console page %s failed", request.url.path)
        return page(
            request,
            "error.html",
            500,
            code=500,
            message=f"this page could not be built ({type(exc).__name__}); see the console's log",
        )


def _deployment_problems(data: ProjectData) -> list[str] | None:
    """What keeps the Airflow this console is told about (``RLOPS_AIRFLOW_URL``: the stack sets it)
    from running the DAGs as params want — a missing pool, a DAG left paused, an import error; None
    without an Airflow to ask."""
    try:
        api = AirflowApi.from_env(timeout_s=3)
    except UserError as exc:  # a credentials file that is not there or not readable
        return [str(exc)]
    if api is None:
        return None
    return airflow_problems(api, resolve_params(params=data.params).model, data.scenarios()).lines()


def _scenario(data: ProjectData, scenario: str) -> str:
    if not SCENARIO_RE.match(scenario) or scenario not in data.scenarios():
        raise NotFound(f"there is no scenario {scenario!r}")
    return scenario


def _add_trace_routes(app: FastAPI, data: ProjectData, views: TraceViews, page: Callable[..., HTMLResponse]) -> None:
    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        rows = [{"scenario": s, "champion": _champion(data, s)} for s in data.scenarios()]
        return page(request, "index.html", rows=rows, deployment=_deployment_problems(data))

    @app.get("/s/{scenario}", response_class=HTMLResponse)
    def scenario_home(scenario: str) -> RedirectResponse:
        return RedirectResponse(f"/s/{_scenario(data, scenario)}/map", 303)

    @app.get("/s/{scenario}/map", response_class=HTMLResponse)
    def decision_map(request: Request, scenario: str, version: str | None = None) -> HTMLResponse:
        scenario = _scenario(data, scenario)
        ov = views.overview(scenario)
        if not ov["versions"]:
            return page(request, "map.html", scenario=scenario, view=None, versions={}, version=None, svg="")
        if version is None:
            version = _default_version(data, views, scenario, ov["versions"])
        elif not VERSION_RE.match(version):
            raise NotFound(f"{version!r} is not a policy version")
        view = views.decision_map(scenario, version)
        return page(
            request,
            "map.html",
            scenario=scenario,
            view=view,
            versions=ov["versions"],
            version=version,
            svg=svg.decision_map(view),
            registry_version=views.registry_version(scenario, version),
            policy_name=data.model_names(scenario)["policy"],
        )

    @app.get("/s/{scenario}/shadow", response_class=HTMLResponse)
    def shadow(request: Request, scenario: str) -> HTMLResponse:
        scenario = _scenario(data, scenario)
        view = views.shadow(scenario)
        return page(
            request,
            "shadow.html",
            scenario=scenario,
            view=view,
            registry={c["version"]: views.registry_version(scenario, c["version"]) for c in view["candidates"]},
            policy_name=data.model_names(scenario)["policy"],
        )

    @app.get("/s/{scenario}/episode/{trace_id}", response_class=HTMLResponse)
    def episode(request: Request, scenario: str, trace_id: str) -> HTMLResponse:
        scenario = _scenario(data, scenario)
        if not TRACE_ID_RE.match(trace_id):
            raise NotFound(f"{trace_id!r} is not a trace id")
        path = views.episode(scenario, trace_id)
        aliases = {v["version"]: v["aliases"] for v in data.model_versions(scenario, "policy")}
        return page(
            request,
            "episode.html",
            scenario=scenario,
            path=path,
            aliases=aliases.get(path["registry_version"] or "", []),
            policy_name=data.model_names(scenario)["policy"],
        )


def _add_registry_routes(app: FastAPI, data: ProjectData, page: Callable[..., HTMLResponse]) -> None:
    @app.get("/s/{scenario}/promotion", response_class=HTMLResponse)
    def promotion(request: Request, scenario: str) -> HTMLResponse:
        scenario = _scenario(data, scenario)
        return page(
            request,
            "promotion.html",
            scenario=scenario,
            view=rv.promotion(data, scenario),
            names=data.model_names(scenario),
        )

    @app.get("/s/{scenario}/evaluation/{run_id}", response_class=HTMLResponse)
    def evaluation(request: Request, scenario: str, run_id: str) -> HTMLResponse:
        scenario = _scenario(data, scenario)
        return page(
            request,
            "evaluation.html",
            scenario=scenario,
            view=rv.evaluation(data, scenario, run_id),
            names=data.model_names(scenario),
        )

    @app.get("/s/{scenario}/drift", response_class=HTMLResponse)
    def drift(request: Request, scenario: str) -> HTMLResponse:
        scenario = _scenario(data, scenario)
        return page(request, "drift.html", scenario=scenario, view=rv.drift(data, scenario), spark=svg.sparkline)

    @app.get("/s/{scenario}/rewards", response_class=HTMLResponse)
    def rewards(request: Request, scenario: str) -> HTMLResponse:
        scenario = _scenario(data, scenario)
        return page(
            request,
            "rewards.html",
            scenario=scenario,
            view=rv.rewards(data, scenario),
            names=data.model_names(scenario),
        )

    @app.get("/s/{scenario}/rewards/diff", response_class=HTMLResponse)
    def reward_diff(request: Request, scenario: str, a: str = "v0", b: str = "v1") -> HTMLResponse:
        scenario = _scenario(data, scenario)
        for label in (a, b):
            if not LABEL_RE.match(label):
                raise NotFound(f"{label!r} is not a reward function version")
        return page(request, "diff.html", scenario=scenario, view=rv.reward_diff(data, scenario, a, b))


def _add_whatif_routes(app: FastAPI, data: ProjectData, jobs: WhatIfJobs, page: Callable[..., HTMLResponse]) -> None:
    @app.get("/s/{scenario}/whatif", response_class=HTMLResponse)
    def whatif(request: Request, scenario: str) -> HTMLResponse:
        scenario = _scenario(data, scenario)
        return page(request, "whatif.html", scenario=scenario, jobs=jobs.list(scenario), error=None, form={})

    @app.post("/s/{scenario}/whatif", response_class=HTMLResponse)
    async def whatif_submit(request: Request, scenario: str) -> Response:
        scenario = _scenario(data, scenario)
        form = await request.form()
        text = {k: str(form.get(k) or "") for k in ("set", "param")}
        try:
            job_id = jobs.submit(scenario, split_assignments(text["set"]), split_assignments(text["param"]))
        except UserError as exc:
            return page(
                request, "whatif.html", 400, scenario=scenario, jobs=jobs.list(scenario), error=str(exc), form=text
            )
        return RedirectResponse(f"/s/{scenario}/whatif/{job_id}", 303)

    @app.get("/s/{scenario}/whatif/{job_id}", response_class=HTMLResponse)
    def whatif_job(request: Request, scenario: str, job_id: str) -> HTMLResponse:
        scenario = _scenario(data, scenario)
        job = jobs.get(scenario, job_id)
        if job is None:
            raise NotFound(f"there is no what-if {job_id!r} of {scenario}")
        return page(request, "whatif_job.html", scenario=scenario, job=job, est=format_estimate)


def _champion(data: ProjectData, scenario: str) -> str | None:
    return next((v["version"] for v in data.model_versions(scenario, "policy") if "champion" in v["aliases"]), None)


def _default_version(data: ProjectData, views: TraceViews, scenario: str, versions: dict[str, int]) -> str:
    """The champion's traces when the store has them, else the version with the most rows."""
    champion = _champion(data, scenario)
    if champion is not None:
        for name in versions:
            if views.registry_version(scenario, name) == champion:
                return name
    return next(iter(versions))
