"""What the Airflow tasks call: conf validation, then one step each.

DAG files import this module inside their tasks (never at parse time). Every function takes the
validated conf (a small dict) and returns a small dict for XCom: URIs, counts, versions — never
data.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rlops.common import step_request
from rlops.common.airflow_api import AirflowApi
from rlops.common.config import resolve_params
from rlops.common.errors import UserError
from rlops.common.policy_ref import PolicyRef
from rlops.common.progress import route_library_output
from rlops.common.run_key import RunKey, parse_run_key
from rlops.common.scenario_name import scenario_name_problem
from rlops.common.threads import resolve_threads, set_torch_threads
from rlops.pipeline_steps.capture.request import CaptureRequest
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.promotion.outcome import PromotionOutcome, PromotionStatus
from rlops.pipeline_steps.stress.request import StressRequest
from rlops.pipeline_steps.training.request import RESOLVED_OPTIONS, TrainRequest
from rlops.sandbox.errors import PackError

log = logging.getLogger(__name__)
#: The longest ``reason`` a run's conf may carry (free text; ``drift`` is the one value that changes
#: what a retrain does: :func:`staged_promotion`).
MAX_REASON = 200
F = TypeVar("F", bound=Callable[..., Any])


class ConfError(UserError):
    """A DAG run's conf that cannot be used; the first task fails with this message."""


class PromotionFailed(RuntimeError):
    """MLflow or storage failed during a promotion (the aliases are as they were): the task fails and
    Airflow retries it."""


#: The promotion statuses that moved (or, in a dry run, would move) an alias: a success.
MOVED = frozenset(
    {PromotionStatus.CHAMPION, PromotionStatus.STAGED, PromotionStatus.WOULD_PROMOTE, PromotionStatus.WOULD_STAGE}
)


@functools.cache
def _failing_without_retry(cls: type[UserError]) -> type[UserError]:
    """``cls`` that Airflow also reads as ``AirflowFailException``: the task fails at once."""
    from airflow.sdk.exceptions import AirflowFailException

    return type(cls.__name__, (cls, AirflowFailException), {"__module__": cls.__module__, "fails_without_retry": True})


def fit_torch_threads() -> int:
    """Set this task process's torch threads from params ``train.threads`` (``auto``: the CPUs the
    process may use divided by the tasks its worker runs at once, see :mod:`rlops.common.threads`)."""
    n = resolve_threads(resolve_params().model.train.threads)
    set_torch_threads(n)
    return n


def no_retry_on_user_error(fn: F) -> F:
    """Bad input (a conf, a pack, a file) fails the task without Airflow's retries: retrying cannot
    mend it, and the run should say so at once. The error keeps its class (a ``ConfError`` is
    still one) and its message; other errors (storage, tracking server) keep their retries."""

    @functools.wraps(fn)
    def task(*args: Any, **kwargs: Any) -> Any:
        # Every task enters here: MLflow's lines must reach the task log at their level, not as
        # the ERRORs Airflow makes of anything written to stderr; and torch gets the task's share of
        # the CPUs before any step runs (the reward model, evaluation and stress tests stall on a
        # busy worker just as PPO does when an OpenMP team outnumbers the free cores).
        route_library_output()
        fit_torch_threads()
        try:
            return fn(*args, **kwargs)
        except UserError as exc:
            if getattr(exc, "fails_without_retry", False):
                raise
            failing = _failing_without_retry(type(exc))  # type: ignore[arg-type]  # a class object is hashable
            again = failing.__new__(failing)
            again.__dict__.update(exc.__dict__)
            again.args = exc.args
            raise again.with_traceback(exc.__traceback__) from exc

    return task  # type: ignore[return-value]  # the wrapper has the task's signature


def end_as_skipped(result: Mapping[str, Any], why: str) -> None:
    """End the running task as *skipped*, ``why`` its last log line: what the grid shows apart from a
    success (a rejected candidate, an interval with no traffic). The result stays the task's XCom.
    Outside a task run (a direct call) there is nothing to mark: it returns."""
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import AirflowSkipException

    try:
        context = get_current_context()
    except Exception:  # noqa: BLE001 - no task is running: a library call, a test
        return
    log.warning("%s", why)
    context["ti"].xcom_push("return_value", dict(result))
    raise AirflowSkipException(why)


def run_key_from_context(context: Mapping[str, Any], interval_minutes: int = 60) -> str:
    """The interval the DAG run owns (see :meth:`RunKey.from_airflow`) — the key every step
    writes under. A run with no Airflow context (a direct call) owns the interval just ended."""
    if not context:
        return str(RunKey.of(None, minutes=interval_minutes))
    return str(RunKey.from_airflow(context, interval_minutes))


@no_retry_on_user_error
def validate_conf(
    params: Mapping[str, Any],
    context: Mapping[str, Any] | None = None,
    interval_minutes: int = 60,
    pools: Sequence[str] = (),
) -> dict[str, Any]:
    """Check the run's conf against the project (pack exists and loads, reward version exists) and
    that the Airflow ``pools`` its tasks need exist; Airflow has already checked the types. Returns
    the conf with its run key."""

    train_options = [o.name for o in step_request.options(TrainRequest) if o.dag]
    conf = {k: params.get(k) for k in ("scenario", *train_options, "dry_run", "staged", "reason", "force")}
    capture_options = [o.name for o in step_request.options(CaptureRequest) if o.dag and o.name in params]
    conf.update({k: params.get(k) for k in capture_options})  # the capture DAG's
    problems = step_request.conf_problems(TrainRequest, conf, required=RESOLVED_OPTIONS)
    problems += step_request.conf_problems(CaptureRequest, conf)
    if not isinstance(conf["scenario"], str) or not conf["scenario"]:
        problems.append(f"scenario {conf['scenario']!r}: expected the name of a pack under scenarios/")
    elif (bad_name := scenario_name_problem(conf["scenario"])) is not None:
        problems.append(bad_name)
    if not isinstance(conf["dry_run"], bool):
        problems.append(f"dry_run {conf['dry_run']!r}: expected true or false")
    if conf["staged"] is not None and not isinstance(conf["staged"], bool):
        problems.append(f"staged {conf['staged']!r}: expected true, false or null (params rollout.staged)")
    if conf["reason"] is not None and (not isinstance(conf["reason"], str) or len(conf["reason"]) > MAX_REASON):
        problems.append(
            f"reason {str(conf['reason'])[:80]!r}: expected a text of at most {MAX_REASON} characters "
            "(schedule, drift, manual, or your own words)"
        )
    if conf["force"] is not None and not isinstance(conf["force"], bool):
        problems.append(f"force {conf['force']!r}: expected true or false")
    if not problems:
        ctx = StepContext.create(conf["scenario"])
        try:
            pack_dir: Path | None = ctx.pack_dir
        except UserError as exc:  # a pack whose name: is another's: nothing of it is loaded
            problems.append(str(exc))
            pack_dir = None
        if pack_dir is not None and not (pack_dir / "scenario.yaml").exists():
            problems.append(f"scenario {conf['scenario']!r}: no pack at {pack_dir}")
        elif pack_dir is not None:
            try:
                pack = ctx.load_pack(calibration=None)
                pack.reward_fn(conf["reward_fn"])
            except PackError as exc:
                problems.append(f"scenario {conf['scenario']!r} does not load: {exc}")
            except KeyError as exc:
                problems.append(str(exc).strip("'\""))
            if conf["reward_switch_to"] and not problems:
                try:
                    pack.reward_fn(conf["reward_switch_to"])
                except KeyError as exc:
                    problems.append("reward_switch_to: " + str(exc).strip("'\""))
    if problems:
        raise ConfError("invalid DAG run conf: " + "; ".join(problems))
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


def _ctx(conf: Mapping[str, Any]) -> StepContext:
    ctx = StepContext.create(
        conf["scenario"], conf["run_key"], bool(conf.get("dry_run")), overrides={"reward_fn": conf["reward_fn"]}
    )
    if conf.get("dag_run_id"):
        ctx.dag_run_id = str(conf["dag_run_id"])
    return ctx


@no_retry_on_user_error
def capture(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The landing zone of the run key's interval; simulated traffic when the conf says
    ``simulate: true``, or when it says null (a scheduled run), the interval has no landing files
    and params say ``capture.simulate_when_empty`` (the result then says
    ``source: simulation:<profile>``). More rows quarantined than ``capture.max_quarantine_share``
    fails the task at once (a user error, no retries: the same rows would fail again), with the
    capture's top reasons; its rows are written first. Warnings (an interval without rows) go to
    the task log."""
    from rlops.pipeline_steps.capture.step import capture_step

    out = capture_step(_ctx(conf), step_request.from_conf(CaptureRequest, conf))
    for warning in out.warnings:
        log.warning("capture: %s", warning)
    for alert in out.alerts:
        log.warning("ALERT: %s", alert)
    result = out.as_dict()
    log.info(
        "capture of %s %s from %s: %d rows in, %d accepted, %d quarantined",
        out.scenario, out.run_key, out.source, out.rows_in, out.rows_accepted, out.rows_quarantined,
    )  # fmt: skip
    if out.rows_accepted == 0 and not out.dry_run:
        end_as_skipped(
            result,
            f"nothing captured: {out.rows_in} rows in, none accepted"
            + (f" ({out.warnings[-1]})" if out.warnings else ""),
        )
    return result


@no_retry_on_user_error
def plan_drift_slices(conf: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The drift window's slices for the mapped ``summarise_slice`` tasks (one empty one when the
    check is not fanned out: ``drift.slice_hours``)."""
    from rlops.pipeline_steps.drift.fan_out import plan_slices

    return plan_slices(_ctx(conf))


@no_retry_on_user_error
def summarise_drift_slice(conf: Mapping[str, Any], drift_slice: Mapping[str, Any]) -> dict[str, Any] | None:
    from rlops.pipeline_steps.drift.fan_out import summarise_slice

    return summarise_slice(_ctx(conf), dict(drift_slice))


@no_retry_on_user_error
def detect_drift(conf: Mapping[str, Any], slices: Sequence[Any] | None = None) -> dict[str, Any]:
    """The drift check; first, in a real run, the business signals' Airflow Variables are offered to
    the signal store (:func:`rlops.pipeline_steps.infra.signal_store.feed_airflow_variables`)."""
    from rlops.pipeline_steps.drift.check import drift_check

    ctx = _ctx(conf)
    if not ctx.dry_run:
        from rlops.pipeline_steps.infra.signal_store import feed_airflow_variables, pack_declarations
        from rlops.sandbox.pack import load_pack

        pack = load_pack(ctx.pack_dir, check_liveness=False)
        for line in feed_airflow_variables(
            ctx.storage, ctx.config.signals, pack_declarations(pack.name, pack.reward_fns)
        ):
            log.warning(line)
    return drift_check(ctx, slices=list(slices or [])).as_dict()


@no_retry_on_user_error
def recalibrate(conf: Mapping[str, Any], drift: Mapping[str, Any]) -> dict[str, Any]:
    from rlops.pipeline_steps.drift.calibrate import recalibrate as run

    if drift.get("signal_drift") and not drift.get("baseline_uri"):  # a signal moved; no traffic to fit
        return {"skipped": "no live traces in the window: the sandbox keeps its calibration"}
    return run(_ctx(conf), traces_uri=drift.get("target_uri")).as_dict()


@no_retry_on_user_error
def label_queue(conf: Mapping[str, Any]) -> dict[str, Any]:
    from rlops.pipeline_steps.labels.step import label_queue_export, label_queue_run

    ctx = _ctx(conf)
    queued = label_queue_run(ctx)
    exported = label_queue_export(ctx)
    return {k: v for k, v in {**queued.as_dict(), "export": exported.as_dict()}.items() if k != "cluster_stats"}


@no_retry_on_user_error
def ingest_labels(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Import every Label Studio annotation file in ``labels/<scenario>/inbox/`` (idempotent)."""
    from rlops.pipeline_steps.labels.step import label_queue_import

    ctx = _ctx(conf)
    inbox = ctx.uri("labels", ctx.scenario, "inbox")
    files = ctx.storage.list(inbox, suffix=".json")
    results = [label_queue_import(ctx, uri) for uri in files]
    return {"files": len(files), "labels": sum(r.ingested for r in results), "dry_run": ctx.dry_run}


@no_retry_on_user_error
def train_reward_model(conf: Mapping[str, Any]) -> dict[str, Any]:
    from rlops.pipeline_steps.training.reward_model import train_reward_model_step

    return train_reward_model_step(_ctx(conf), conf["reward_fn"]).as_dict()


@no_retry_on_user_error
def relabel(conf: Mapping[str, Any], reward_model: Mapping[str, Any]) -> dict[str, Any]:
    """Score the window's captured traces with the reward model just trained."""
    from rlops.pipeline_steps.training.relabel import relabel_step

    ctx = _ctx(conf)
    if ctx.dry_run or not reward_model.get("model_version"):
        return {"skipped": True, "reason": "dry run" if ctx.dry_run else "no reward model was trained"}
    return relabel_step(ctx, str(reward_model["model_version"])).as_dict()


@no_retry_on_user_error
def train_policy(conf: Mapping[str, Any], mode: str, reward_model: Mapping[str, Any] | None = None) -> dict[str, Any]:
    import socket

    from rlops.pipeline_steps.training.policy import train_policy as run

    # The reward model version this DAG run trained (when it did) is the one a model/blend run uses.
    rm_version = (reward_model or {}).get("model_version")
    request = step_request.from_conf(
        TrainRequest, conf, mode=mode, reward_model_version=None if rm_version is None else str(rm_version)
    )
    out = run(_ctx(conf), request)
    # Where training ran: the distributed test checks that it was the gpu queue's worker.
    return {**out.as_dict(), "worker_host": socket.gethostname()}


@no_retry_on_user_error
def stress_test(conf: Mapping[str, Any], trained: Mapping[str, Any]) -> dict[str, Any]:
    from rlops.pipeline_steps.stress.step import stress_test as run

    if not trained.get("model_version"):
        return {"skipped": True, "reason": "no candidate was trained", "passed": False}
    out = run(_ctx(conf), step_request.from_conf(StressRequest, conf, policy_version=str(trained["model_version"])))
    return {k: v for k, v in out.as_dict().items() if k in ("passed", "verdict", "reasons", "report_uri", "html_uri")}


def staged_promotion(conf: Mapping[str, Any]) -> bool:
    """Whether a retrain stages its candidate: the conf's ``staged``, else params
    ``rollout.staged`` — ``rollout.staged_emergency`` for a retrain triggered by drift that would
    replace a (stale) champion. A staged first policy (no champion yet) still becomes champion at
    once unless ``rollout.staged_first_champion``: there is no champion to run a live A/B against
    (:func:`rlops.pipeline_steps.promotion.flow.promote`)."""
    if conf.get("staged") is not None:
        return bool(conf["staged"])
    from rlops.registry.client import CHAMPION, policy_model_name

    ctx = _ctx(conf)
    cfg = ctx.config.rollout
    if conf.get("reason") == "drift" and ctx.tracker.get_alias(policy_model_name(ctx.scenario), CHAMPION):
        return cfg.staged_emergency
    return cfg.staged


@no_retry_on_user_error
def evaluate_and_promote(
    conf: Mapping[str, Any], trained: Mapping[str, Any], stressed: Mapping[str, Any], staged: bool | None = None
) -> dict[str, Any]:
    """Gated promotion of the trained candidate; ``staged`` (None: :func:`staged_promotion`): as
    challenger first, moved on by the roll-out DAG (5% → 15% → 100% of traffic)."""
    from rlops.pipeline_steps.promotion.flow import promote
    from rlops.registry.client import CHAMPION, policy_model_name

    if not trained.get("model_version"):
        return {"promoted": False, "reason": "no candidate was trained"}
    staged = staged_promotion(conf) if staged is None else staged
    ctx = _ctx(conf)
    candidate = str(trained["model_version"])
    if ctx.tracker.get_alias(policy_model_name(ctx.scenario), CHAMPION) == candidate:
        # this interval's training was done and promoted by an earlier run of the same run key
        # (an emergency retrain triggered at the hour the scheduled one also runs): nothing to judge
        mark_done_for(ctx, conf)
        return {
            "promoted": False,
            "action": "none",
            "candidate": candidate,
            "reason": f"v{candidate} is already the champion",
        }
    out = promote(ctx, candidate=candidate, staged=staged)
    mark_done_for(ctx, conf)
    return promotion_result(out)


def promotion_result(out: PromotionOutcome) -> dict[str, Any]:
    """The promotion's XCom; a candidate that did not move is a *skipped* task with the reason, a
    promotion that MLflow or storage broke a failed one (retried), never a plain success."""
    result = out.as_dict()
    log.info("promotion of %s v%s: %s — %s", out.scenario, out.candidate, out.status.value, out.reason)
    if out.status is PromotionStatus.FAILED:
        raise PromotionFailed(f"promotion of v{out.candidate} failed: {out.reason}")
    if out.status not in MOVED:
        end_as_skipped(result, f"v{out.candidate} not promoted ({out.status.value}): {out.reason}")
    return result


def mark_done_for(ctx: StepContext, conf: Mapping[str, Any]) -> None:
    """This retrain's inputs are now the last completed ones of its mode."""
    from rlops.pipeline_steps.orchestration.retrain_inputs import mark_done

    mark_done(ctx, str(conf.get("mode") or "full"))


@no_retry_on_user_error
def rollout(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The roll-out DAG's step: advance, finish or withdraw the challenger; roll back a champion
    that regressed (:mod:`rlops.pipeline_steps.promotion.rollout`)."""
    from rlops.pipeline_steps.promotion.rollout import rollout_step

    return rollout_step(_ctx(conf)).as_dict()


@no_retry_on_user_error
def inputs_changed(conf: Mapping[str, Any], mode: str) -> bool:
    """False when a retrain would see exactly the inputs of the last one of this pack and mode
    (``dags.skip_unchanged``): the DAG then skips its training tasks."""
    from rlops.pipeline_steps.orchestration.retrain_inputs import record_if_changed

    if conf.get("force"):
        log.info("retrain forced (conf force: true): the inputs are not compared with the last retrain's")
        return True
    return record_if_changed(_ctx(conf), mode, conf)


@no_retry_on_user_error
def validate_promotion_conf(params: Mapping[str, Any], context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The promotion DAG's conf: the common checks plus the candidate version."""
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


@no_retry_on_user_error
def promote_requested(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Gated promotion of ``conf['candidate']``; the outcome is written back on the version."""
    from rlops.pipeline_steps.promotion.flow import promote_from_alias

    requested_by = str(conf.get("requested_by") or "airflow")
    return promotion_result(promote_from_alias(_ctx(conf), conf["candidate"], requested_by=requested_by))
