"""``rlops demo`` (``make demo``): the whole rlops loop on one pack, embedded (no servers) — the
credit-approval pack by default (params ``scenario``), any pack with ``--scenario``: a pack name
under scenarios/ (e.g. ``complaint_handling``) or a pack folder anywhere, as every command takes it;
the pack needs a ``live`` profile, the stand-in for production traffic.

1. validate the pack; 2. capture an interval of traffic from the pack's ``live`` profile (the
production rule engine serving, as before any RL policy exists); 3. detect its drift against the
sandbox; 4. recalibrate the sandbox to it; 5. train the reward model; 6. train a PPO policy in the
calibrated sandbox; 7. stress-test reward function and policy; 8. evaluate it against the champion
(the rule engine on the first run) on the same seeded episodes and promote it to ``champion`` if
every gate passes.

Each run owns a run key of its own — the minute that has just ended (``20261201T0947-1m``), one
earlier when a previous demo already used it — so a second run, even within the same hour, trains
a new candidate and gates it against the champion the first one left. Not beating the champion
is an outcome, not a failure: the gate table says why, and the demo exits 0 either way.

Everything lands in ``./rlops-data`` (trace store, reports, checkpoints) and the SQLite MLflow
store ``./rlops-data/mlflow.db``. Budgets come from the ``demo:`` block of params.yaml, overridden
by the ``demo:`` block of the pack's params.yaml (a pack whose payoffs come late needs more steps).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rlops.commands.common_args import scenario_of
from rlops.common.config import load_params, resolve_local
from rlops.common.errors import UserError
from rlops.common.run_key import RunKey
from rlops.pipeline_steps.capture.exploration import ExplorationCost
from rlops.pipeline_steps.capture.request import CaptureRequest
from rlops.pipeline_steps.drift.calibrate import recalibrate
from rlops.pipeline_steps.drift.check import drift_check
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.promotion.gates import GATES_HELP, gate_state
from rlops.pipeline_steps.promotion.outcome import PromotionOutcome, PromotionStatus
from rlops.pipeline_steps.stress.request import StressRequest
from rlops.pipeline_steps.stress.step import stress_test
from rlops.pipeline_steps.training.request import TrainRequest
from rlops.pipeline_steps.training.reward_model import train_reward_model_step
from rlops.registry.client import ui_url
from rlops.sandbox.pack import load_pack

STEPS = 8


def _say(i: int, text: str) -> None:
    print(f"[{i}/{STEPS}] {text}", flush=True)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def run(scenario: str | None = None, landing: RunKey | None = None) -> int:
    """The demo on ``scenario``: a pack name under scenarios/ or a pack folder (None: params
    ``scenario``). ``landing``: the loop on the traces the agents wrote to the landing zone in that
    interval (``rlops run``) instead of simulated traffic of the pack's ``live`` profile; an interval
    whose capture accepted nothing stops the run (exit 2) saying where the newest landing files are."""
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.promotion.flow import promote
    from rlops.pipeline_steps.training.policy import train_policy

    params = load_params()
    packs: dict[str, Any] = {}
    if scenario is None:
        scenario = str(params.get("scenario"))
    else:
        # A pack folder is its parent as the scenarios folder, kept through the demo's overrides below.
        packs["scenarios_dir"], scenario = scenario_of(scenario, params)
        params.update(packs)
    run_key = str(landing) if landing is not None else _own_run_key(StepContext.create(scenario, params=params))
    # The project's demo budgets, with the pack's own (its params.yaml `demo:` block) on top.
    demo = StepContext.create(scenario, run_key, params=params).config.demo
    import torch

    torch.set_num_threads(demo.torch_threads)
    overrides = {
        **packs,
        "capture": {"episodes": demo.capture_episodes},
        "drift": {"baseline_episodes": min(demo.capture_episodes, 3000)},
        "reward_model": {"pairs": demo.reward_model_pairs},
        "evaluate": {"episodes": demo.evaluate_episodes},
    }
    ctx = StepContext.create(scenario, run_key, params=load_params(overrides=overrides))
    started = time.perf_counter()
    what = "rlops run on the agents' traces" if landing is not None else "rlops demo"
    print(f"{what} — scenario {scenario}, run key {run_key}, data in {resolve_local('rlops-data')}\n")

    pack, dt = _timed(lambda: load_pack(ctx.pack_dir))
    _say(
        1,
        f"pack {pack.name}: {len(pack.scenario.spec.fields)} fields, {pack.scenario.n_actions} actions, "
        f"profiles {sorted(pack.scenario.profiles)}, reward functions {sorted(pack.reward_fns)} ({dt:.1f}s)",
    )

    request = CaptureRequest(simulate=False) if landing is not None else CaptureRequest(simulate=True, profile="live")
    cap, dt = _timed(lambda: capture_step(ctx, request))
    explored = cap.exploration
    cost = ExplorationCost.from_dict(explored).describe() if isinstance(explored, dict) else f"exploration {explored}"
    served = (
        "from the agents' landing zone" if landing is not None else f"of live traffic served by {cap.policy_version}"
    )
    _say(
        2,
        f"captured {cap.rows_in} trace rows {served}: "
        f"{cap.rows_accepted} accepted, {cap.rows_quarantined} quarantined ({dt:.1f}s)\n      {cost}",
    )
    if cap.rows_accepted == 0:  # nothing to learn from: a run that accepted nothing did not succeed
        raise UserError(
            f"rlops run: the capture of {scenario} for {run_key} accepted no row, so there is nothing to train on. "
            + " ".join(cap.warnings)
        )

    drift, dt = _timed(lambda: drift_check(ctx))
    live_return = "not measured" if drift.live_mean_return is None else drift.live_mean_return
    _say(
        3,
        f"drift vs sandbox: {drift.summary} {drift.drifted_fields}; live mean return "
        f"{live_return} vs sandbox {drift.sandbox_mean_return} ({dt:.1f}s)\n"
        f"      report: {drift.html_uri}",
    )

    cal, dt = _timed(lambda: recalibrate(ctx, traces_uri=drift.target_uri))
    moved = ", ".join(f"{k} {v['before']:.3f}→{v['after']:.3f}" for k, v in list(cal.check.items())[:3])
    _say(4, f"sandbox recalibrated to live: version {cal.version}, profile '{cal.profile}' ({moved}) ({dt:.1f}s)")

    rm, dt = _timed(lambda: train_reward_model_step(ctx))
    _say(
        5,
        f"reward model v{rm.model_version}: held-out pairwise accuracy {rm.heldout_pairwise_accuracy:.3f} ({dt:.1f}s)",
    )

    timesteps = demo.timesteps
    _say(6, f"training a policy with masked PPO for {timesteps:,} steps in the calibrated sandbox …")
    tr, dt = _timed(lambda: train_policy(ctx, TrainRequest(timesteps=timesteps)))
    print(
        f"      candidate {scenario}-policy v{tr.model_version}: mean return {tr.mean_return:.3f} ({dt:.1f}s)",
        flush=True,
    )

    st, dt = _timed(lambda: stress_test(ctx, StressRequest(policy_version=str(tr.model_version))))
    _say(7, f"stress test: {st.verdict}{'' if st.passed else ' — ' + '; '.join(st.reasons)} ({dt:.1f}s)")

    pr, dt = _timed(lambda: _promote_or_say_why(promote, ctx, str(tr.model_version)))
    _say(8, f"gated evaluation vs {pr.baseline or 'champion'} ({dt:.1f}s):")
    _print_gates(pr.gates or [])
    champion = ctx.tracker.get_alias(f"{scenario}-policy", "champion")
    verdict = (
        "PROMOTED"
        if pr.promoted
        else "STAGED (a challenger serves a share of traffic)"
        if pr.action == "challenger"
        else "NOT PROMOTED (the champion stays; a normal outcome)"
    )
    print(f"\n{verdict}: {pr.reason}")
    print(f"champion: {scenario}-policy v{champion}" if champion else "champion: none (the rule engine serves)")

    print(
        f"total {time.perf_counter() - started:.0f}s\n\nSee it in the MLflow UI:\n"
        f"  .venv/bin/mlflow ui --backend-store-uri {ctx.tracker.tracking_uri}\n"
        f"then open {ui_url('http://127.0.0.1:5000', f'experiments/{ctx.tracker.experiment_id}/runs')} "
        f"(experiment '{scenario}', model '{scenario}-policy', in the model-training view)."
    )
    return 0


def _own_run_key(ctx: Any) -> str:
    """The minute that has just ended, or the latest earlier one no demo has used (each demo's
    calibration is written under its run key)."""
    from datetime import timedelta

    key = RunKey.ending_at(datetime.now(UTC), minutes=1)
    while ctx.storage.exists(ctx.uri("calibrations", ctx.scenario, f"{key}.json")):
        key = RunKey(key.start - timedelta(minutes=1), key.start)
    return str(key)


def _promote_or_say_why(promote: Callable[..., PromotionOutcome], ctx: Any, candidate: str) -> PromotionOutcome:
    """The gated promotion; a candidate that cannot be promoted (e.g. training reproduced the
    champion itself) is an outcome with its reason, not a crash."""
    try:
        return promote(ctx, candidate=candidate)
    except (ValueError, UserError) as exc:
        reason = str(exc).strip("'\"")
        return PromotionOutcome(PromotionStatus.NOT_PROMOTABLE, ctx.scenario, reason, ctx.dry_run, candidate, gates=[])


def _print_gates(gates: list[dict[str, Any]]) -> None:

    def fmt(v: Any) -> str:
        return "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))

    rows = [(g["gate"], fmt(g["candidate"]), fmt(g["champion"]), str(g["threshold"]), gate_state(g)) for g in gates]
    head = ("gate", "candidate", "champion", "threshold", "")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    for r in [head, *rows]:
        print("      " + "  ".join(c.ljust(w) for c, w in zip(r, widths)))
    if rows:
        print(f"      (what each row decides, and what a skip means: {GATES_HELP})")
