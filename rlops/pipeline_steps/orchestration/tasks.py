"""What the Airflow tasks call: one step each.

DAG files import this module inside their tasks (never at parse time). Every function takes the
checked conf of the run (:func:`rlops.pipeline_steps.orchestration.run_conf.validate_conf`'s
result, read once as a :class:`~rlops.pipeline_steps.orchestration.run_conf.RunConf`) and the
results of the tasks before it, and returns its step's typed result as a small dict for XCom:
URIs, counts, versions — never data.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from rlops.common.errors import UserError
from rlops.pipeline_steps.capture.request import CaptureRequest
from rlops.pipeline_steps.drift.request import DriftCheckRequest
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.labels.request import LabelQueueRequest
from rlops.pipeline_steps.orchestration.retrain_inputs import mark_done, record_if_changed
from rlops.pipeline_steps.orchestration.run_conf import RunConf
from rlops.pipeline_steps.orchestration.task_runtime import PromotionFailed, end_as_skipped, no_retry_on_user_error
from rlops.pipeline_steps.outcomes.request import OutcomeCaptureRequest
from rlops.pipeline_steps.promotion.outcome import PromotionOutcome, PromotionStatus
from rlops.pipeline_steps.promotion.request import PromoteRequest, RolloutRequest
from rlops.pipeline_steps.stress.request import StressRequest
from rlops.pipeline_steps.training.request import TrainRequest
from rlops.registry.client import CHAMPION, policy_model_name

log = logging.getLogger(__name__)

#: The promotion statuses that moved (or, in a dry run, would move) an alias: a success.
MOVED = frozenset(
    {PromotionStatus.CHAMPION, PromotionStatus.STAGED, PromotionStatus.WOULD_PROMOTE, PromotionStatus.WOULD_STAGE}
)


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

    run = RunConf.of(conf)
    out = capture_step(run.step_context(), run.request(CaptureRequest))
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
def capture_outcomes(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The late outcomes landed in the run key's interval (``Tracer.outcome`` lines under
    ``<landing>/_outcomes``) into the outcome store, after the interval's traces, so that an outcome
    of an episode captured in the same interval finds it. An interval without outcome lines ends the
    task as skipped; one none of whose records was accepted fails it at once (no retries: the same
    records would be refused again) with the first reasons, its records kept in the outcome
    quarantine."""
    from rlops.pipeline_steps.outcomes.step import capture_outcomes as run

    run_conf = RunConf.of(conf)
    out = run(run_conf.step_context(), run_conf.request(OutcomeCaptureRequest))
    result = out.as_dict()
    log.info(
        "outcomes of %s from %s: %d records in, %d accepted, %d quarantined; %d values added, %d replaced",
        out.scenario, out.source, out.records_in, out.records_accepted, out.records_quarantined,
        out.values_added, out.values_replaced,
    )  # fmt: skip
    if out.records_in == 0:
        end_as_skipped(result, f"no outcome lines landed in the interval ({out.source})")
    elif out.records_accepted == 0:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(out.quarantine_reasons.items(), key=lambda kv: -kv[1]))
        raise UserError(
            f"outcome capture of {out.source}: none of {out.records_in} record(s) was accepted ({reasons}); "
            f"all are quarantined in {out.quarantine_uri} — expected outcomes of episodes in the trace store, "
            "within outcomes.max_delay_days of their last decision, in the format of docs/outcomes.md"
        )
    return result


@no_retry_on_user_error
def plan_drift_slices(conf: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The drift window's slices for the mapped ``summarise_slice`` tasks (one empty one when the
    check is not fanned out: ``drift.slice_hours``)."""
    from rlops.pipeline_steps.drift.fan_out import plan_slices

    return plan_slices(RunConf.of(conf).step_context())


@no_retry_on_user_error
def summarise_drift_slice(conf: Mapping[str, Any], drift_slice: Mapping[str, Any]) -> dict[str, Any] | None:
    from rlops.pipeline_steps.drift.fan_out import summarise_slice

    return summarise_slice(RunConf.of(conf).step_context(), dict(drift_slice))


@no_retry_on_user_error
def detect_drift(conf: Mapping[str, Any], slices: Sequence[Any] | None = None) -> dict[str, Any]:
    """The drift check; first, in a real run, the business signals' Airflow Variables are offered to
    the signal store (:func:`rlops.pipeline_steps.infra.signal_store.feed_airflow_variables`)."""
    from rlops.pipeline_steps.drift.check import drift_check

    run = RunConf.of(conf)
    ctx = run.step_context()
    if not ctx.dry_run:
        from rlops.pipeline_steps.infra.signal_store import feed_airflow_variables, pack_declarations
        from rlops.sandbox.pack import load_pack

        pack = load_pack(ctx.pack_dir, check_liveness=False)
        for line in feed_airflow_variables(
            ctx.storage, ctx.config.signals, pack_declarations(pack.name, pack.reward_fns)
        ):
            log.warning(line)
    return drift_check(ctx, run.request(DriftCheckRequest), slices=list(slices or [])).as_dict()


@no_retry_on_user_error
def recalibrate(conf: Mapping[str, Any], drift: Mapping[str, Any]) -> dict[str, Any]:
    from rlops.pipeline_steps.drift.calibrate import recalibrate as run

    if drift.get("signal_drift") and not drift.get("baseline_uri"):  # a signal moved; no traffic to fit
        return {"skipped": "no live traces in the window: the sandbox keeps its calibration"}
    return run(RunConf.of(conf).step_context(), traces_uri=drift.get("target_uri")).as_dict()


@no_retry_on_user_error
def label_queue(conf: Mapping[str, Any]) -> dict[str, Any]:
    from rlops.pipeline_steps.labels.step import label_queue_export, label_queue_run

    run = RunConf.of(conf)
    ctx = run.step_context()
    queued = label_queue_run(ctx, run.request(LabelQueueRequest))
    exported = label_queue_export(ctx)
    return {k: v for k, v in {**queued.as_dict(), "export": exported.as_dict()}.items() if k != "cluster_stats"}


@no_retry_on_user_error
def ingest_labels(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Import every Label Studio annotation file in ``labels/<scenario>/inbox/`` (idempotent)."""
    from rlops.pipeline_steps.labels.step import label_queue_import

    ctx = RunConf.of(conf).step_context()
    inbox = ctx.uri("labels", ctx.scenario, "inbox")
    files = ctx.storage.list(inbox, suffix=".json")
    results = [label_queue_import(ctx, uri) for uri in files]
    return {"files": len(files), "labels": sum(r.ingested for r in results), "dry_run": ctx.dry_run}


@no_retry_on_user_error
def train_reward_model(conf: Mapping[str, Any]) -> dict[str, Any]:
    from rlops.pipeline_steps.training.reward_model import train_reward_model_step

    run = RunConf.of(conf)
    return train_reward_model_step(run.step_context(), run.reward_fn).as_dict()


@no_retry_on_user_error
def relabel(conf: Mapping[str, Any], reward_model: Mapping[str, Any]) -> dict[str, Any]:
    """Score the window's captured traces with the reward model just trained."""
    from rlops.pipeline_steps.training.relabel import relabel_step

    ctx = RunConf.of(conf).step_context()
    if ctx.dry_run or not reward_model.get("model_version"):
        return {"skipped": True, "reason": "dry run" if ctx.dry_run else "no reward model was trained"}
    return relabel_step(ctx, str(reward_model["model_version"])).as_dict()


@no_retry_on_user_error
def train_policy(conf: Mapping[str, Any], mode: str, reward_model: Mapping[str, Any] | None = None) -> dict[str, Any]:
    import socket

    from rlops.pipeline_steps.training.policy import train_policy as run

    # The reward model version this DAG run trained (when it did) is the one a model/blend run uses.
    rm_version = (reward_model or {}).get("model_version")
    run_conf = RunConf.of(conf)
    request = run_conf.request(
        TrainRequest, mode=mode, reward_model_version=None if rm_version is None else str(rm_version)
    )
    out = run(run_conf.step_context(), request)
    # Where training ran: the distributed test checks that it was the gpu queue's worker.
    return {**out.as_dict(), "worker_host": socket.gethostname()}


@no_retry_on_user_error
def stress_test(conf: Mapping[str, Any], trained: Mapping[str, Any]) -> dict[str, Any]:
    from rlops.pipeline_steps.stress.step import stress_test as run

    if not trained.get("model_version"):
        return {"skipped": True, "reason": "no candidate was trained", "passed": False}
    run_conf = RunConf.of(conf)
    out = run(run_conf.step_context(), run_conf.request(StressRequest, policy_version=str(trained["model_version"])))
    return {k: v for k, v in out.as_dict().items() if k in ("passed", "verdict", "reasons", "report_uri", "html_uri")}


def staged_promotion(conf: Mapping[str, Any]) -> bool:
    """Whether a retrain stages its candidate: the conf's ``staged``, else params
    ``rollout.staged`` — ``rollout.staged_emergency`` for a retrain triggered by drift that would
    replace a (stale) champion. A staged first policy (no champion yet) still becomes champion at
    once unless ``rollout.staged_first_champion``: there is no champion to run a live A/B against
    (:func:`rlops.pipeline_steps.promotion.flow.promote`)."""
    run = RunConf.of(conf)
    if run.retrain.staged is not None:
        return run.retrain.staged
    ctx = run.step_context()
    cfg = ctx.config.rollout
    if run.retrain.reason == "drift" and ctx.tracker.get_alias(policy_model_name(ctx.scenario), CHAMPION):
        return cfg.staged_emergency
    return cfg.staged


@no_retry_on_user_error
def evaluate_and_promote(
    conf: Mapping[str, Any], trained: Mapping[str, Any], stressed: Mapping[str, Any], staged: bool | None = None
) -> dict[str, Any]:
    """Gated promotion of the trained candidate; ``staged`` (None: :func:`staged_promotion`): as
    challenger first, moved on by the roll-out DAG (5% → 15% → 100% of traffic)."""
    from rlops.pipeline_steps.promotion.flow import promote

    if not trained.get("model_version"):
        return {"promoted": False, "reason": "no candidate was trained"}
    staged = staged_promotion(conf) if staged is None else staged
    ctx = RunConf.of(conf).step_context()
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


def mark_done_for(ctx: StepServices, conf: Mapping[str, Any]) -> None:
    """This retrain's inputs are now the last completed ones of its mode."""

    mark_done(ctx, RunConf.of(conf).mode)


@no_retry_on_user_error
def rollout(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The roll-out DAG's step: advance, finish or withdraw the challenger; roll back a champion
    that regressed (:mod:`rlops.pipeline_steps.promotion.rollout`)."""
    from rlops.pipeline_steps.promotion.rollout import rollout_step

    run = RunConf.of(conf)
    return rollout_step(run.step_context(), run.request(RolloutRequest)).as_dict()


@no_retry_on_user_error
def inputs_changed(conf: Mapping[str, Any], mode: str) -> bool:
    """False when a retrain would see exactly the inputs of the last one of this pack and mode
    (``dags.skip_unchanged``): the DAG then skips its training tasks."""

    run = RunConf.of(conf)
    if run.retrain.force:
        log.info("retrain forced (conf force: true): the inputs are not compared with the last retrain's")
        return True
    return record_if_changed(run.step_context(), mode, run.options)


@no_retry_on_user_error
def promote_requested(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Gated promotion of the conf's candidate; the outcome is written back on the version."""
    from rlops.pipeline_steps.promotion.flow import promote_requested as run

    run_conf = RunConf.of(conf)
    return promotion_result(run(run_conf.step_context(), run_conf.request(PromoteRequest)))
