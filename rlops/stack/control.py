"""``rlops stack up|status|down``: the whole loop as a deployment on one machine, without Docker.

``up`` starts what is not running yet (a second ``up`` reuses what runs), creates once what the
deployment needs (secrets, Airflow's database and schema, pools, the MLflow webhook), unpauses the
DAGs params name, and returns where to look. ``status`` says, for each part, whether it runs and
answers, and what stops the DAGs from running (a missing pool, a DAG left paused, an import error).
``down`` stops only the processes this stack started.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rlops.common.airflow_api import AirflowApi
from rlops.common.config import home, pack_names, scenarios_dir
from rlops.common.errors import InfrastructureError, UserError
from rlops.common.params_model import Params
from rlops.registry.alias_records import registry_key
from rlops.registry.webhooks import register_webhook
from rlops.stack import airflow_setup, processes
from rlops.stack.home import ADMIN_USER, StackHome
from rlops.stack.parts import Part, StackLayout, layout


class StackError(InfrastructureError):
    """A part of the stack did not start or answer."""

    hint = "`rlops stack status` says which part; its output is in the stack's logs folder"


@dataclass(frozen=True)
class PartStatus:
    name: str
    state: str
    """running (alive and answering) | starting (alive, not answering yet) | stopped"""
    pid: int | None
    url: str | None
    log: str


@dataclass(frozen=True)
class StackStatus:
    home: str
    airflow_home: str
    database: str
    airflow_url: str
    mlflow_url: str
    user: str
    credentials_file: str
    """Where the Airflow login's password is (never printed: status output lands in logs and tickets)."""
    airflow_cli: str
    """The line to type before the ``airflow`` command line talks to this stack."""
    parts: tuple[PartStatus, ...]
    missing_pools: tuple[str, ...] = ()
    paused: tuple[str, ...] = ()
    """DAGs params want unpaused that are paused."""
    import_errors: tuple[str, ...] = ()
    started: tuple[str, ...] = ()
    reused: tuple[str, ...] = ()
    unpaused: tuple[str, ...] = ()
    seconds: float | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def up(self) -> bool:
        return all(p.state == "running" for p in self.parts)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["up"] = self.up
        return out


def stack_home(params: Params, override: str | Path | None = None) -> StackHome:
    root = Path(override) if override else Path(params.stack.home)
    return StackHome((root if root.is_absolute() else home() / root).resolve())


def _packs(params: Params) -> list[str]:
    """The packs that get DAGs: a pack whose folder name or params are refused gets none (the
    ``pack_problems`` DAG file's import error says why, and status lists it), so nothing waits for them."""
    from rlops.pipeline_steps.orchestration.settings import pack_problems  # imports Airflow's SDK

    refused = {p.scenario for p in pack_problems()}
    return [name for name in pack_names(scenarios_dir(params.model_dump())) if name not in refused]


def _secrets(stack: StackHome) -> dict[str, str]:

    return {**stack.secrets(), "registry_key": registry_key().decode()}


def _check_ports(lay: StackLayout, running: set[str]) -> None:
    taken = [p for p in lay.parts if p.port and p.name not in running and not processes.port_free(lay.host, p.port)]
    if not taken:
        return
    names = ", ".join(f"{lay.host}:{p.port} ({p.name})" for p in taken)
    homes = {StackHome(cwd.parent) for p in taken if (cwd := processes.listener_cwd(int(p.port or 0)))}
    other = next((h for h in homes if h.state_file.exists() and h.root != lay.home.root), None)
    if other is not None:  # typically `rlops stack up` run from another folder than the first time
        raise UserError(
            f"cannot start a stack in {lay.home.root}: {names} are held by the stack of {other.root}, which is "
            f"running; use it (`rlops stack status --home {other.root}`, or run from the folder it was started "
            "from), stop it (`rlops stack down --home ...`), or choose other ports in params.yaml"
        )
    raise UserError(
        f"cannot start the stack: {names} already in use by another program; stop it, or choose other "
        "ports in params.yaml (stack.airflow_port, stack.mlflow_port, stack.console_port, stack.webhook_port)"
    )


def _started(record: dict[str, Any]) -> processes.Started:
    return processes.Started(int(record.get("pid", 0)), int(record.get("start_ticks", 0)))


def _wait_healthy(lay: StackLayout, parts: list[Part], pids: dict[str, processes.Started], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = [p for p in parts if p.health]
    while waiting:
        for p in parts:
            if not processes.is_ours(pids[p.name]):
                raise StackError(
                    f"{p.name} exited while starting; the end of {lay.home.logs / (p.name + '.log')}:\n"
                    + _tail(lay.home.logs / f"{p.name}.log")
                )
        waiting = [p for p in waiting if not processes.answers(str(p.health))]
        if waiting and time.monotonic() > deadline:
            raise StackError(
                f"{', '.join(p.name for p in waiting)} did not answer within {timeout_s:.0f} s "
                f"(stack.start_timeout_s); logs under {lay.home.logs}"
            )
        if waiting:
            time.sleep(1)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def up(params: Params, home_override: str | Path | None = None) -> StackStatus:
    """Start the stack (see the module doc); its status with what was started, reused and unpaused."""
    import airflow

    from rlops.pipeline_steps.orchestration.settings import DAG_KINDS, dag_id

    t0 = time.monotonic()
    stack = stack_home(params, home_override)
    state = stack.state()
    pids = {n: _started(r) for n, r in state["parts"].items()}
    running = {n for n, p in pids.items() if processes.is_ours(p)}
    # before anything is created: a refused `up` leaves no folder, secrets or registry key behind
    _check_ports(layout(params, stack, defaultdict(str), database_url=""), running)
    stack.create()
    secrets = _secrets(stack)
    database = airflow_setup.database_url(params, stack)
    lay = layout(params, stack, secrets, database)

    started: list[str] = []

    def launch(part: Part) -> None:
        if part.name in running:
            return
        pids[part.name] = processes.start(part.argv, part.env, stack.logs / f"{part.name}.log", stack.airflow_home)
        started.append(part.name)
        state["parts"][part.name] = {**asdict(pids[part.name]), "port": part.port, "started_at": time.time()}
        stack.save_state({**state, "database": database})

    # The servers that need no Airflow boot while its schema is migrated (tens of seconds).
    airflow_parts = [p for p in lay.parts if p.name.startswith("airflow-")]
    for part in lay.parts:
        if part not in airflow_parts:
            launch(part)
    airflow_setup.write_cli_config(stack, airflow_parts[0].env)
    airflow_setup.migrate(stack, airflow_parts[0].env, database, airflow.__version__)
    for part in airflow_parts:
        launch(part)
    _wait_healthy(lay, list(lay.parts), pids, params.stack.start_timeout_s)

    api = AirflowApi(lay.airflow_url, ADMIN_USER, secrets["airflow_password"])
    airflow_setup.ensure_pools(api, params.stack.pools)
    register_webhook(lay.mlflow_url, f"http://{lay.host}:{params.stack.webhook_port}/mlflow/webhook",
                     secrets["webhook_secret"])  # fmt: skip
    packs = _packs(params)
    expected = {dag_id(kind, p) for kind in DAG_KINDS for p in packs}
    remaining = max(10.0, params.stack.start_timeout_s - (time.monotonic() - t0))
    states = airflow_setup.wait_for_dags(api, expected, remaining)
    unpaused = airflow_setup.unpause(api, airflow_setup.wanted_unpaused(params, states, packs), states)
    now = _status(params, stack, lay, secrets, api)
    return replace(
        now,
        started=tuple(started),
        reused=tuple(sorted(running)),
        unpaused=tuple(unpaused),
        seconds=round(time.monotonic() - t0, 1),
    )


def _status(
    params: Params, stack: StackHome, lay: StackLayout, secrets: dict[str, str], api: AirflowApi | None
) -> StackStatus:
    state = stack.state()
    parts = []
    for p in lay.parts:
        started = _started(state["parts"].get(p.name, {}))
        alive = processes.is_ours(started)
        answering = alive and (p.health is None or processes.answers(p.health))
        parts.append(
            PartStatus(
                p.name,
                "running" if answering else "starting" if alive else "stopped",
                started.pid if alive else None,
                p.url,
                str(stack.logs / f"{p.name}.log"),
            )
        )
    seen = airflow_setup.AirflowProblems()
    api_part = next(p for p in parts if p.name == "airflow-api-server")
    if api is not None and api_part.state == "running":
        seen = airflow_setup.airflow_problems(api, params, _packs(params))
    missing, paused, errors, problems = seen.missing_pools, seen.paused, seen.import_errors, list(seen.lines())
    problems += [f"{p.name} is {p.state} (log: {p.log})" for p in parts if p.state != "running"]
    return StackStatus(
        home=str(stack.root),
        airflow_home=str(stack.airflow_home),
        database=airflow_setup._redacted(lay.database_url),
        airflow_url=lay.airflow_url,
        mlflow_url=lay.mlflow_url,
        user=ADMIN_USER,
        credentials_file=str(stack.credentials_file),
        airflow_cli=f"export AIRFLOW_HOME={stack.airflow_home}",
        parts=tuple(parts),
        missing_pools=missing,
        paused=paused,
        import_errors=errors,
        problems=tuple(problems),
    )


def status(params: Params, home_override: str | Path | None = None) -> StackStatus:
    """Each part's state and URL, and what stops the DAGs from running; starts and creates nothing."""
    stack = stack_home(params, home_override)
    if not stack.secrets_file.exists():
        raise UserError(f"no stack at {stack.root}: start one with `rlops stack up`")
    secrets = _secrets(stack)
    database = str(stack.state().get("database") or "(not created)")
    lay = layout(params, stack, secrets, database)
    return _status(params, stack, lay, secrets, AirflowApi(lay.airflow_url, ADMIN_USER, secrets["airflow_password"]))


#: Stop order: what runs tasks first (a task cut mid-way by a stopped MLflow would fail and retry
#: against nothing), MLflow last. A part of another name (an older stack's) goes first.
STOP_ORDER = (
    "airflow-scheduler", "airflow-triggerer", "airflow-dag-processor", "airflow-api-server", "webhook", "console",
    "mlflow", "log-rotation",
)  # fmt: skip


def _stop_rank(name: str) -> int:
    return STOP_ORDER.index(name) if name in STOP_ORDER else -1


def down(params: Params, home_override: str | Path | None = None) -> list[str]:
    """Stop the processes this stack started (newest first), and any of their children left; the
    parts stopped. Data, secrets and the database stay for the next ``up``."""
    stack = stack_home(params, home_override)
    if not stack.state_file.exists():
        return []
    state = stack.state()
    stopped = []
    for name, rec in sorted(state["parts"].items(), key=lambda kv: _stop_rank(kv[0])):
        started = _started(rec)
        if processes.is_ours(started):
            stopped.append(name)
        processes.stop(started)  # also what a part that died left running in its session
    state["parts"] = {}
    stack.save_state(state)
    return stopped
