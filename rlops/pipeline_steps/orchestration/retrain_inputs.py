"""Skip a retrain whose inputs have not changed (params ``dags.skip_unchanged``).

A retrain is a function of its inputs: the pack (``scenario.yaml`` and the reward function's
source), the sandbox calibration of the run's interval, the champion it is gated against (and, in
incremental mode, warm-started from), the reward function, the budget and the reward source — and,
when the policy's reward comes from the reward model (``reward_source`` ``model``/``blend``), the
captured trace partitions it learns from. A scripted-reward policy never reads traces, so new
traffic alone does not make it train again. When the digest of those inputs equals the one of the
last *completed* retrain of the same pack and mode, training would repeat itself: the DAG skips it.

The digest of a retrain in progress is kept as ``pending`` and becomes ``done`` when its
promotion step has run (:func:`mark_done`), so a retrain that failed is tried again.
State: ``state/retrain/<scenario>/<mode>.json`` in the project storage.

An incremental retrain fine-tunes the champion, so it also waits (:func:`incremental_blocker`)
while there is no champion to fine-tune (the full retrain trains the first policy) and while a
challenger is rolling out: a few thousand steps on the old champion must not displace a candidate
that is being proven on live traffic (a full retrain on changed inputs may).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from rlops.common import step_request
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.training.request import TrainRequest
from rlops.registry.client import CHALLENGER, CHAMPION, policy_model_name

log = logging.getLogger(__name__)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def retrain_inputs(ctx: StepContext, mode: str, conf: Mapping[str, Any]) -> dict[str, Any]:
    """The inputs a retrain of ``mode`` would see for ``ctx``'s run key (see the module docstring)."""
    pack = ctx.pack_dir
    reward_file = pack / f"reward_{conf.get('reward_fn')}.py"
    cal = ctx.read_calibration("latest")
    source = conf.get("reward_source") or ctx.config.train.reward_source
    inputs: dict[str, Any] = {
        "mode": mode,
        # the run's options that decide what it trains: the request's, so a new option counts here too
        "conf": {k: conf.get(k) for k in step_request.digest_options(TrainRequest)},
        "reward_source": source,
        "scenario_yaml": _sha((pack / "scenario.yaml").read_bytes()),
        "reward_fn_source": _sha(reward_file.read_bytes()) if reward_file.exists() else None,
        "pack_params": _sha((pack / "params.yaml").read_bytes()) if (pack / "params.yaml").exists() else None,
        "calibration": None if cal is None else _sha(json.dumps(cal, sort_keys=True, default=str).encode()),
        "champion": ctx.tracker.get_alias(policy_model_name(ctx.scenario), CHAMPION),
    }
    if source != "scripted":  # the reward model learns from the captured traces
        inputs["traces"] = sorted(ctx.storage.list(ctx.traces.scenario_uri(ctx.scenario), suffix=".parquet"))
    return inputs


def digest(inputs: Mapping[str, Any]) -> str:
    return _sha(json.dumps(inputs, sort_keys=True, default=str).encode())


def _state_uri(ctx: StepServices, mode: str) -> str:
    return ctx.uri("state", "retrain", ctx.scenario, f"{mode}.json")


def incremental_blocker(ctx: StepServices) -> str | None:
    """Why an incremental retrain waits now (None: it may run); see the module docstring."""
    name = policy_model_name(ctx.scenario)
    if ctx.tracker.get_alias(name, CHAMPION) is None:
        return "no champion to fine-tune yet: the full retrain trains the first policy"
    challenger = ctx.tracker.get_alias(name, CHALLENGER)
    if challenger is not None:
        return f"v{challenger} is rolling out as challenger: an incremental candidate waits until it ends"
    return None


def record_if_changed(ctx: StepContext, mode: str, conf: Mapping[str, Any]) -> bool:
    """True (and the digest kept as pending) when this retrain's inputs differ from those of the
    last completed one, or skipping is off; False when the retrain would repeat itself, or is an
    incremental one that must wait (:func:`incremental_blocker`)."""
    if mode == "incremental" and not ctx.dry_run:
        blocker = incremental_blocker(ctx)
        if blocker is not None:
            log.info("retrain_incremental skipped for %s: %s", ctx.scenario, blocker)
            return False
    if not ctx.config.dags.skip_unchanged or ctx.dry_run:
        return True
    now = digest(retrain_inputs(ctx, mode, conf))
    uri = _state_uri(ctx, mode)
    state = ctx.storage.read_json(uri) if ctx.storage.exists(uri) else {}
    if state.get("done") == now:
        log.warning(
            "retrain_%s of %s skipped: its inputs (pack, calibration, champion, reward function, budget, "
            "traces) equal those of the retrain of run key %s; trigger with conf {\"force\": true} to retrain "
            "anyway", mode, ctx.scenario, state.get("done_run_key") or "(unknown)",
        )  # fmt: skip
        return False
    ctx.storage.write_json(uri, {**state, "pending": now, "pending_run_key": ctx.run_key})
    return True


def mark_done(ctx: StepServices, mode: str) -> None:
    """The pending retrain of ``mode`` completed: its inputs are now the last completed ones."""
    uri = _state_uri(ctx, mode)
    if ctx.dry_run or not ctx.storage.exists(uri):
        return
    state = ctx.storage.read_json(uri)
    if state.get("pending"):
        ctx.storage.write_json(uri, {"done": state["pending"], "done_run_key": state.get("pending_run_key")})
