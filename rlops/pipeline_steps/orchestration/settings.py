"""Shared settings of the rlops DAGs: the packs, their resolved params, default args, typed
params, tags. Light on purpose — DAG files import it at parse time, so it imports nothing heavy
(YAML, the params loader and the scenario schema; no pack is compiled to arrays and no pack code
runs: a reward module is only checked to compile).

One set of DAGs per pack: every folder with a ``scenario.yaml`` under the scenarios folder
(``RLOPS_SCENARIOS_DIR``, else params ``scenarios_dir``, else ``scenarios/`` of the repository)
gets ``<dag>__<pack>`` DAGs, each scheduled by the ``dags:`` params block resolved for that pack
(the project's ``params.yaml`` with the pack's own ``params.yaml`` on top — the same resolution
as every step and CLI command, :class:`~rlops.pipeline_steps.infra.context.StepContext`). Every
Param default comes from there too; a DAG file holds no budget or version of its own.

A pack that cannot run gets no DAGs, and the ``pack_problems`` DAG file's import error names it,
its file and what is wrong: a folder name that is no scenario name, a ``scenario.yaml`` that is
not a regular file, not YAML or not a scenario, a ``name:`` other than the folder's, a reward
module missing or not compiling, params that do not validate. A missing scenarios folder is that
file's import error too, instead of no DAGs and no word.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import Param

from rlops.common import config, step_request
from rlops.common.config import pack_names, params_path
from rlops.common.scenario_name import RULE, SCENARIO_NAME, identity_problem, shown
from rlops.pipeline_steps.capture.request import CaptureRequest
from rlops.pipeline_steps.drift.request import DriftCheckRequest
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.labels.request import LabelQueueRequest
from rlops.pipeline_steps.orchestration.run_request import RetrainRequest, RunRequest
from rlops.pipeline_steps.outcomes.request import OutcomeCaptureRequest
from rlops.pipeline_steps.promotion.request import PromoteRequest, RolloutRequest
from rlops.pipeline_steps.training.request import RESOLVED_OPTIONS, TrainRequest
from rlops.sandbox.errors import PackError
from rlops.sandbox.precheck import REWARD_FILE, check_reward_syntax, reward_files
from rlops.sandbox.reward_choice import choose_label
from rlops.sandbox.segments import read_spec

START_DATE = pendulum.datetime(2026, 1, 1, tz="UTC")
GPU_QUEUE = "gpu"
GPU_POOL = "gpu"
DAG_KINDS = (
    "trace_capture",
    "drift_monitor",
    "label_queue",
    "retrain_incremental",
    "retrain_full",
    "rollout",
    "promote",
)
# The interval a run owns when its DAG has no schedule (or one with no fixed period): the cadence
# each DAG was designed for.
DEFAULT_MINUTES = {
    "trace_capture": 15,
    "drift_monitor": 60,
    "label_queue": 60,
    "retrain_incremental": 15,
    "retrain_full": 60,
    "rollout": 15,
    "promote": 60,
}
_PRESET_MINUTES = {"@hourly": 60, "@daily": 1440, "@midnight": 1440, "@weekly": 10080}

#: Retries wait 30 s, 60 s, 120 s (and longer): a tracking-server or storage outage of up to three
#: minutes costs no run (each call to MLflow fails within seconds, params tracking.http_max_retries).
DEFAULT_ARGS: dict[str, Any] = {
    "owner": "ml-ops",
    "retries": 3,
    "retry_delay": timedelta(seconds=30),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
}


def dag_id(kind: str, scenario: str) -> str:
    """``retrain_full__credit_approval``: the id of a pack's DAG."""
    return f"{kind}__{scenario}"


def pack_name_problem(scenario: str) -> str | None:
    """Why a pack's folder name cannot be a scenario name (:mod:`rlops.common.scenario_name`), or
    None. The name is used as is, never rewritten, so two folders can never end up with one DAG id;
    every name the grammar allows is a valid Airflow DAG id."""
    if SCENARIO_NAME.match(scenario):
        return None
    return (
        f"pack folder name {shown(scenario)} cannot name a pack (its DAG ids, trace partitions and "
        f"registered models): {RULE}; rename the folder"
    )


def pack_files_problem(folder: Path) -> str | None:
    """Why the pack in ``folder`` cannot get DAGs for what its files say, or None: a
    ``scenario.yaml`` that is no regular file, not YAML or not a scenario, a ``name:`` other than
    the folder's, no reward module, or one that does not compile. Nothing of the pack is run or
    compiled to arrays (a parse stays light); the step that loads the pack checks the rest."""
    try:
        spec = read_spec(folder)
        for path in reward_files(folder):
            check_reward_syntax(path, folder)
    except PackError as exc:
        return str(exc)
    except OSError as exc:  # the folder went away or cannot be listed while it is read
        return f"{folder}: cannot read the pack: {exc.strerror or exc}"
    return identity_problem(folder.name, spec.name, spec.file)


def scenarios_folder_problem(root: Path) -> str | None:
    """Why the scenarios folder gives no pack DAGs at all (missing, or not a folder), or None."""
    where = "RLOPS_SCENARIOS_DIR" if os.environ.get("RLOPS_SCENARIOS_DIR") else "params scenarios_dir"
    if root.is_dir():
        return None
    what = "does not exist" if not os.path.lexists(root) else "is not a folder"
    return f"the scenarios folder {root} ({where}) {what}: no pack gets DAGs; expected the folder of the scenario packs"


def schedule_minutes(schedule: str | None, default: int) -> int:
    """The period of a cron schedule or preset in whole minutes (``*/5 * * * *`` → 5), ``default``
    when there is none or it is not a whole number of minutes up to a week."""
    if not schedule:
        return default
    if schedule in _PRESET_MINUTES:
        return _PRESET_MINUTES[schedule]
    if schedule.startswith("@"):
        return default
    from datetime import datetime

    from croniter import croniter

    try:
        it = croniter(schedule, datetime(2026, 1, 5))
        ticks = [it.get_next(datetime) for _ in range(3)]
    except (ValueError, KeyError):
        return default
    gaps = {int((b - a).total_seconds()) for a, b in zip(ticks, ticks[1:])}
    minutes = min(gaps) // 60
    return minutes if len(gaps) == 1 and 0 < minutes <= 7 * 24 * 60 and min(gaps) % 60 == 0 else default


def scenarios_dir(params: Mapping[str, Any] | None = None) -> Path:
    """Where the packs are (``RLOPS_SCENARIOS_DIR``, else params ``scenarios_dir``, else the
    repository's ``scenarios/``): :func:`rlops.common.config.scenarios_dir`."""
    return config.scenarios_dir(dict(params) if params is not None else config.load_params())


def scenario_names(root: Path | None = None) -> list[str]:
    """Packs under the scenarios folder (a folder with a scenario.yaml), sorted."""
    return pack_names(root if root is not None else scenarios_dir())


def pack_folders(root: Path) -> list[str]:
    """The folders under ``root`` that hold a ``scenario.yaml`` of any kind (a folder, a pipe, a
    dangling link too: such a pack is refused with its reason, not passed over), sorted."""
    try:
        return sorted(p.name for p in root.iterdir() if p.is_dir() and os.path.lexists(p / "scenario.yaml"))
    except OSError:  # missing, not a folder, not readable: scenarios_folder_problem says which
        return []


@dataclass(frozen=True)
class PackDagConfig:
    """What a pack's DAGs take from its resolved params at parse time."""

    scenario: str
    reward_fn: str
    full_timesteps: int
    incremental_timesteps: int
    schedules: dict[str, str | None] = field(default_factory=dict)

    def schedule(self, kind: str) -> str | None:
        return self.schedules.get(kind)

    def interval_minutes(self, kind: str) -> int:
        """The data interval a run of ``kind`` owns: the DAG's designed cadence, or its schedule's
        period when that is shorter (a pack whose params run its DAGs every 5 minutes owns 5-minute
        intervals, so consecutive runs never own the same data twice)."""
        default = DEFAULT_MINUTES[kind]
        return min(default, schedule_minutes(self.schedule(kind), default))

    def tags(self, *more: str) -> list[str]:
        return ["rlops", f"pack:{self.scenario}", *more]


def resolved_params(scenario: str) -> tuple[dict[str, Any], Any]:
    """The project params and the pack's StepContext (its ``section`` merges the pack's params):
    the one place the DAGs read settings from."""
    params = config.load_params()
    return params, StepContext.create(scenario, params=params)


def pack_reward_fn(ctx: Any, params: Mapping[str, Any]) -> str:
    """The reward function a run uses without conf, by the rule of
    :func:`rlops.sandbox.reward_choice.choose_label` applied to the pack's files (no pack load)."""
    from rlops.sandbox.precheck import load_params

    available = [m.group(1) for p in ctx.pack_dir.iterdir() if (m := REWARD_FILE.match(p.name))]
    own = load_params(ctx.pack_dir).get("reward_fn")
    label, _ = choose_label(ctx.scenario, available, None, own, params.get("reward_fn"))
    return label


def pack_dag_config(scenario: str) -> PackDagConfig:
    params, ctx = resolved_params(scenario)
    train, dags = ctx.config.train, ctx.config.dags
    # promote runs only when asked (the webhook, a person): it has no schedule to set
    schedules = {
        kind: (getattr(dags, kind) if dags.scheduled and kind in type(dags).model_fields else None)
        for kind in DAG_KINDS
    }
    return PackDagConfig(
        scenario=scenario,
        reward_fn=pack_reward_fn(ctx, params),
        full_timesteps=train.total_timesteps,
        incremental_timesteps=train.incremental_timesteps,
        schedules=schedules,
    )


@dataclass(frozen=True)
class PackProblem:
    """A pack under the scenarios folder that gets no DAGs, and why (its name or its params)."""

    scenario: str
    reason: str


class PackProblems(ValueError):
    """Packs that get no DAGs: raised by the ``pack_problems`` DAG file, so Airflow lists them as
    that file's import error while every other pack keeps its DAGs."""


@dataclass(frozen=True)
class _Packs:
    configs: list[PackDagConfig]
    problems: list[PackProblem]
    folder_problem: str | None


_CACHE: dict[tuple[Any, ...], _Packs] = {}
_ROOTS: dict[tuple[Any, ...], Path] = {}


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_mode


def _signature() -> tuple[Any, ...]:
    """What the configs depend on: the params file, the environment overrides, the scenarios
    folder, every pack's params file, scenario.yaml and reward modules (a change in any re-reads
    them)."""
    p = params_path()
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("RLOPS_")))
    base = (str(p), p.stat().st_mtime_ns if p.exists() else None, env)
    if base not in _ROOTS:
        _ROOTS.clear()
        _ROOTS[base] = scenarios_dir()
    root = _ROOTS[base]
    stamps = []
    for name in pack_folders(root):
        folder = root / name
        try:
            rewards = sorted(f.name for f in folder.iterdir() if REWARD_FILE.match(f.name))
        except OSError:
            rewards = []
        files = ["params.yaml", "scenario.yaml", *rewards]
        stamps.append((name, tuple((f, _stamp(folder / f)) for f in files)))
    return (*base, str(root), _stamp(root), tuple(stamps))


def _read_packs() -> _Packs:
    """The config of every pack under the scenarios folder (read once per parse of the DAG folder:
    every DAG file asks, the params are resolved once while nothing changed), and the packs that
    get none: a folder name that is no scenario name, a pack whose files are broken
    (:func:`pack_files_problem`), params that do not validate. One broken pack costs only its own
    DAGs; a scenarios folder that is missing costs every DAG, and says so."""
    key = _signature()
    if key not in _CACHE:
        root = _ROOTS[key[:3]]
        configs, problems = [], []
        for name in pack_folders(root):
            reason = pack_name_problem(name) or pack_files_problem(root / name)
            if reason is None:
                try:
                    configs.append(pack_dag_config(name))
                    continue
                except (ValueError, OSError) as exc:  # ConfigError/ParamsError are ValueErrors
                    reason = " ".join(str(exc).split())
            problems.append(PackProblem(name, reason))
        _CACHE.clear()
        _CACHE[key] = _Packs(configs, problems, scenarios_folder_problem(root))
    return _CACHE[key]


def pack_dag_configs() -> list[PackDagConfig]:
    """One config per pack under the scenarios folder that can have DAGs (see :func:`pack_problems`)."""
    return _read_packs().configs


def pack_problems() -> list[PackProblem]:
    """The packs under the scenarios folder that get no DAGs, each with its reason."""
    return _read_packs().problems


def raise_pack_problems() -> None:
    """Raise :class:`PackProblems` naming the scenarios folder when it is missing, and every pack
    that gets no DAGs (nothing when there is none of either)."""
    packs = _read_packs()
    if packs.folder_problem:
        raise PackProblems(packs.folder_problem)
    if packs.problems:
        raise PackProblems(
            f"{len(packs.problems)} pack(s) get no DAGs: "
            + "; ".join(f"{p.scenario}: {p.reason}" for p in packs.problems)
        )


#: The requests whose options each kind of DAG offers as Params, beyond the scenario, the
#: :data:`~rlops.pipeline_steps.training.request.RESOLVED_OPTIONS` and :class:`RunRequest` every pack
#: DAG offers: a new option of one of these requests reaches the DAG's Params and its conf check
#: (:func:`rlops.pipeline_steps.orchestration.run_conf.validate_conf`) with no other edit.
DAG_REQUESTS: dict[str, tuple[type, ...]] = {
    "trace_capture": (CaptureRequest, OutcomeCaptureRequest),
    "drift_monitor": (DriftCheckRequest,),
    "label_queue": (LabelQueueRequest,),
    "retrain_incremental": (RetrainRequest, TrainRequest),
    "retrain_full": (RetrainRequest, TrainRequest),
    "rollout": (RolloutRequest,),
    "promote": (PromoteRequest,),
}


def dag_params(pack: PackDagConfig, kind: str, mode: str = "full") -> dict[str, Param]:
    """The conf a pack's DAG of ``kind`` accepts, validated by Airflow before a run is created; every
    default from the pack's resolved params, else the request's."""
    timesteps = pack.full_timesteps if mode == "full" else pack.incremental_timesteps
    resolved = {"mode": mode, "timesteps": timesteps, "reward_fn": pack.reward_fn}
    params: dict[str, Param] = {
        "scenario": Param(
            pack.scenario, type="string", enum=[pack.scenario], description="the scenario pack this DAG belongs to"
        ),
        **step_request.dag_params(TrainRequest, resolved, only=RESOLVED_OPTIONS),
        **step_request.dag_params(RunRequest),
    }
    for request in DAG_REQUESTS[kind]:
        offered = [o.name for o in step_request.options(request) if o.dag and o.name not in params]
        params.update(step_request.dag_params(request, only=offered))
    return params


def dag_settings(pack: PackDagConfig, kind: str, mode: str = "full") -> dict[str, Any]:
    """What every rlops DAG shares: its id, the pack's schedule for it, start date, no catch-up,
    one run at a time, retries with backoff and the typed params. Each DAG file adds its tags,
    doc and tasks."""
    return {
        "dag_id": dag_id(kind, pack.scenario),
        "schedule": pack.schedule(kind),
        "start_date": START_DATE,
        "catchup": False,
        "max_active_runs": 1,
        "default_args": DEFAULT_ARGS,
        "params": dag_params(pack, kind, mode=mode),
    }


def pack_doc(doc: str | None, kind: str, pack: PackDagConfig) -> str:
    """The DAG file's doc with the pack, the DAG id and the schedule it runs on."""
    when = pack.schedule(kind) or "only when triggered"
    return (
        f"{doc or ''}\n\nPack **{pack.scenario}** — DAG `{dag_id(kind, pack.scenario)}`, schedule `{when}` "
        f"(params `dags.{kind}`); Param defaults from the pack's resolved params."
    )
