"""A DAG run's conf: checked once by the run's first task (:func:`validate_conf`), read by every
later task as one typed record (:class:`RunConf`).

The options a conf may hold are those of the requests the DAGs offer
(:data:`~rlops.pipeline_steps.orchestration.settings.DAG_REQUESTS`): Airflow checks their types
against the generated Params before it creates a run; :func:`validate_conf` checks them again
(a caller of the task function passes no Params) and what Airflow cannot see: the pack exists and
loads, its reward functions exist, the pools the tasks need exist. Its result, the XCom every
later task receives, is a small dict: the conf's options with the run key and the DAG run id.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rlops.common import step_request
from rlops.common.airflow_api import AirflowApi
from rlops.common.errors import UserError
from rlops.common.policy_ref import PolicyRef
from rlops.common.run_key import RunKey, parse_run_key
from rlops.common.scenario_name import scenario_name_problem
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.orchestration.run_request import RetrainRequest, RunRequest
from rlops.pipeline_steps.orchestration.settings import DAG_REQUESTS
from rlops.pipeline_steps.orchestration.task_runtime import ConfError, no_retry_on_user_error
from rlops.pipeline_steps.training.request import RESOLVED_OPTIONS, TrainRequest
from rlops.sandbox.errors import PackError

log = logging.getLogger(__name__)
R = TypeVar("R")

#: The requests whose every option a checked conf holds (given, else its default); the options of
#: the other requests a DAG offers are kept only when the conf gives them.
_ALWAYS = (RunRequest, RetrainRequest, TrainRequest)


def _offered() -> list[step_request.Option]:
    """Every option some pack DAG offers, each once (the first request that declares it)."""
    requests = dict.fromkeys([*_ALWAYS, *(r for kind in DAG_REQUESTS.values() for r in kind)])
    seen: dict[str, step_request.Option] = {}
    for request in requests:
        for o in step_request.options(request):
            if o.dag:
                seen.setdefault(o.name, o)
    return list(seen.values())


@dataclass(frozen=True)
class RunConf:
    """A checked DAG run conf, as a task reads it: the run's own options typed, and the step
    options from which each task builds its step's request (:meth:`request`)."""

    scenario: str
    run_key: str
    dag_run_id: str | None
    run: RunRequest
    retrain: RetrainRequest
    options: Mapping[str, Any]

    @classmethod
    def of(cls, conf: Mapping[str, Any]) -> RunConf:
        """The record of :func:`validate_conf`'s result (a task's XCom input)."""
        return cls(
            scenario=str(conf["scenario"]),
            run_key=str(conf["run_key"]),
            dag_run_id=str(conf["dag_run_id"]) if conf.get("dag_run_id") else None,
            run=step_request.from_conf(RunRequest, conf),
            retrain=step_request.from_conf(RetrainRequest, conf),
            options=dict(conf),
        )

    @property
    def reward_fn(self) -> str | None:
        """The reward function the run uses (the pack's resolved one unless the conf names another)."""
        value = self.options.get("reward_fn")
        return None if value is None else str(value)

    @property
    def mode(self) -> str:
        """``full`` or ``incremental``: what a retrain run trains (other DAGs carry the default)."""
        return str(self.options.get("mode") or "full")

    def request(self, request: type[R], **given: Any) -> R:
        """The request of one step of this run (``given``: what the task decides itself)."""
        return step_request.from_conf(request, self.options, **given)

    def step_context(self) -> StepContext:
        """The step context of this run: its pack, run key, dry run, reward function and run id."""
        ctx = StepContext.create(self.scenario, self.run_key, self.run.dry_run, overrides={"reward_fn": self.reward_fn})
        ctx.dag_run_id = self.dag_run_id
        return ctx


@no_retry_on_user_error
def validate_conf(
    params: Mapping[str, Any],
    context: Mapping[str, Any] | None = None,
    interval_minutes: int = 60,
    pools: Sequence[str] = (),
) -> dict[str, Any]:
    """Check the run's conf against the requests the DAGs offer and against the project (the pack
    exists and loads, its reward functions exist), and that the Airflow ``pools`` its tasks need
    exist. Returns the conf with its run key and DAG run id."""
    offered = _offered()
    always = {o.name for r in _ALWAYS for o in step_request.options(r) if o.dag}
    given = {o.name: params[o.name] for o in offered if o.name in params}
    for name in RESOLVED_OPTIONS:  # the DAG resolves them; a conf without one is refused by name
        given.setdefault(name, None)
    problems = [p for o in offered if o.name in given and (p := _problem(o, given[o.name]))]
    scenario = params.get("scenario")
    if not isinstance(scenario, str) or not scenario:
        problems.insert(0, f"scenario {scenario!r}: expected the name of a pack under scenarios/")
    elif (bad_name := scenario_name_problem(scenario)) is not None:
        problems.insert(0, bad_name)
    if not problems:
        problems = _pack_problems(str(scenario), given)
    if problems:
        raise ConfError("invalid DAG run conf: " + "; ".join(problems))
    conf: dict[str, Any] = {"scenario": scenario}
    conf.update({o.name: given.get(o.name, o.default) for o in offered if o.name in given or o.name in always})
    conf["run_key"] = run_key_of(params, context or {}, interval_minutes)
    conf["dag_run_id"] = dag_run_id_from_context(context or {})
    missing = missing_pools(pools)
    if missing:
        raise ConfError(
            f"Airflow has no pool {', '.join(repr(p) for p in missing)}: the training task would wait in state "
            f"'scheduled' for ever. Create it (`airflow pools set {missing[0]} 1 \"rlops training\"`; "
            "`rlops stack up` creates the pools of params stack.pools)"
        )
    return conf


def _problem(o: step_request.Option, value: Any) -> str | None:
    """What is wrong with one option's value in a conf; the options the DAG resolves need a value."""
    if value is None and o.name in RESOLVED_OPTIONS:
        return f"{o.name} None: expected {dataclasses.replace(o, nullable=False).expected()}"
    return o.problem(value)


def _pack_problems(scenario: str, given: Mapping[str, Any]) -> list[str]:
    """What keeps the conf's pack from running: no pack, a pack that does not load, a reward
    function (or a reward switch) it does not have."""
    ctx = StepContext.create(scenario)
    try:
        pack_dir: Path = ctx.pack_dir
    except UserError as exc:  # a pack whose name: is another's: nothing of it is loaded
        return [str(exc)]
    if not (pack_dir / "scenario.yaml").exists():
        return [f"scenario {scenario!r}: no pack at {pack_dir}"]
    try:
        pack = ctx.load_pack(calibration=None)
        pack.reward_fn(given["reward_fn"])
    except PackError as exc:
        return [f"scenario {scenario!r} does not load: {exc}"]
    except KeyError as exc:
        return [str(exc).strip("'\"")]
    if given.get("reward_switch_to"):
        try:
            pack.reward_fn(given["reward_switch_to"])
        except KeyError as exc:
            return ["reward_switch_to: " + str(exc).strip("'\"")]
    return []


@no_retry_on_user_error
def validate_promotion_conf(params: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The promote DAG's conf: the common checks, then the candidate as a version number."""
    conf = validate_conf(params, context)
    candidate = params.get("candidate")
    try:
        ref = PolicyRef.parse(str(candidate), conf["scenario"]) if isinstance(candidate, (str, int)) else None
    except UserError:
        ref = None
    if ref is None or ref.version is None:
        raise ConfError(
            f"invalid DAG run conf: candidate {candidate!r}: expected a policy version, e.g. 3 or "
            f"{conf['scenario']}-policy/3"
        )
    conf.update(candidate=ref.version, requested_by=str(params.get("requested_by") or "airflow"))
    return conf


def run_key_from_context(context: Mapping[str, Any], interval_minutes: int = 60) -> str:
    """The interval the DAG run owns (see :meth:`RunKey.from_airflow`) — the key every step
    writes under. A run with no Airflow context (a direct call) owns the interval just ended."""
    if not context:
        return str(RunKey.of(None, minutes=interval_minutes))
    return str(RunKey.from_airflow(context, interval_minutes))


def run_key_of(params: Mapping[str, Any], context: Mapping[str, Any], interval_minutes: int) -> str:
    """The conf's ``run_key`` (an emergency retrain owns the interval of the drift run that asked for
    it), else the interval the DAG run's date says."""
    given = params.get("run_key")
    if given in (None, ""):
        return run_key_from_context(context, interval_minutes)
    try:
        return parse_run_key(str(given))
    except UserError as exc:
        raise ConfError(f"invalid DAG run conf: {exc}") from None


def missing_pools(pools: Sequence[str]) -> list[str]:
    """The Airflow pools among ``pools`` that do not exist, asked of the API server this process is
    told about (``RLOPS_AIRFLOW_URL``: the stack sets it). Without one (``dag.test()``, a bare worker)
    or when it does not answer, nothing is reported: the check must not fail a run the scheduler could run."""
    import urllib.error

    api = AirflowApi.from_env(timeout_s=5) if pools else None
    if api is None:
        return []
    try:
        return [p for p in pools if not api.pool_exists(p)]
    except (urllib.error.URLError, OSError, UserError) as exc:
        log.warning("could not ask Airflow whether pools %s exist: %s", ", ".join(pools), exc)
        return []


def dag_run_id_from_context(context: Mapping[str, Any]) -> str | None:
    """Airflow's id of the DAG run (tagged on the pass's MLflow runs), when there is one."""
    run_id = context.get("run_id") or getattr(context.get("dag_run"), "run_id", None)
    return str(run_id) if run_id else None
