"""The roll-out step (the ``rollout__<pack>`` DAG, every 15 minutes): a staged challenger moves on
its live A/B gates, a champion whose live return falls is rolled back.

* **Challenger** (``challenger`` alias, share in the version tag ``traffic_fraction``): once its
  current stage has served at least ``rollout.min_stage_minutes``, its live traffic since the
  stage began (at most ``evaluate.ab_window_hours``) is judged by the ``ab:`` gates against the
  champion's traffic of the same window. All pass → the next share of ``evaluate.rollout_stages``
  (``advanced``), or champion at 100 % (``finished``: challenger → champion, old champion →
  previous). A gate fails → the challenger stops serving (``withdrawn``). Too few episodes → it
  holds.
  A ``challenger`` rlops did not stage (the alias set in the MLflow UI, no signed record of rlops'
  own move) never passed the offline gates nor the stress test: it is withdrawn unjudged
  (``withdrawn``: share 0, alias removed, why tagged), whatever share its tag claims. Set in the UI
  with the webhook running, it is a promotion request the webhook puts through the gates itself.
* **Champion** (no challenger): its live mean episode return over the last
  ``rollout.regression_window_hours`` against the return of the champion before it (the last
  entry of the champion history) in the same window. When it is lower by more than the gate's
  margin (``evaluate.segment_tolerance`` × the earlier champion's return scale, ``evaluate.scale_floor``)
  and by more than three standard errors, the champion is
  rolled back (``rolled_back``). A recalibration inside the window (the world changed: returns
  before and after are not comparable) suspends the judgement.

Every move is recorded as a ``rollout`` step run in MLflow (tag ``rlops.rollout.action``, its
reason as a parameter) and on the version (``rlops.rollout.reason`` / ``rlops.rolled_back.reason``).
Holds move nothing and are only returned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rlops.common.errors import UserError
from rlops.common.params_operations import RolloutParams
from rlops.common.policy_ref import PolicyRef
from rlops.common.run_key import RunKey
from rlops.common.step_result import StepResult
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.promotion.alias_moves import TRAFFIC_TAG, finish, stage_challenger, withdraw_challenger
from rlops.pipeline_steps.promotion.evaluate_live import live_ab_gates
from rlops.pipeline_steps.promotion.flow import rollback
from rlops.pipeline_steps.promotion.gate_stats import return_scale
from rlops.pipeline_steps.promotion.gates import share_text
from rlops.pipeline_steps.promotion.lock import lock_path, promotion_lock
from rlops.pipeline_steps.promotion.request import RolloutRequest
from rlops.pipeline_steps.promotion.stages import (
    Stage,
    champion_eta,
    current_stage,
    next_stage,
    rollout_plan,
    segmented,
)
from rlops.registry import tags as T
from rlops.registry.alias_records import require_key
from rlops.registry.aliases import champion_history
from rlops.registry.client import CHALLENGER, CHAMPION, TrackingError, policy_model_name
from rlops.trace_store.outcome_join import settled

if TYPE_CHECKING:
    import pandas as pd

    from rlops.common.params_promotion import EvaluateParams
    from rlops.sandbox.pack import Pack

ADVANCED, FINISHED, WITHDRAWN, ROLLED_BACK, HELD = "advanced", "finished", "withdrawn", "rolled_back", "held"
STAGE_MOVES = frozenset({ADVANCED, FINISHED})  # moves of a challenger to a larger share (100 %: champion)


@dataclass(frozen=True)
class RolloutMove:
    """What one roll-out run did to one version."""

    version: str | None
    action: str
    reason: str
    traffic_fraction: float | None = None
    ab_gates: tuple[dict[str, Any], ...] = ()
    traffic_segment: str | None = None
    """The segment the new share applies to (segment stages; None: all traffic)."""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ab_gates"] = list(self.ab_gates)
        return d


@dataclass(frozen=True)
class RolloutTick(StepResult):
    """One roll-out run of a pack: its move, and the champion after it."""

    scenario: str
    run_key: str
    dry_run: bool
    move: RolloutMove
    champion: str | None
    """The champion once the move is made."""

    def as_dict(self) -> dict[str, Any]:
        """Flat: the move's fields beside the run's (the roll-out DAG's XCom)."""
        head = {"scenario": self.scenario, "run_key": self.run_key, "dry_run": self.dry_run}
        return {**head, **self.move.to_dict(), "champion": self.champion}


@dataclass(frozen=True)
class RolloutSetup:
    """One roll-out tick's inputs, resolved where its request enters."""

    rollout: RolloutParams
    """The params' ``rollout:`` block with the request's options over it."""
    evaluate: EvaluateParams
    """The params' ``evaluate:`` block: the live A/B gates and their window, the regression margin,
    the promotion lock's timeout."""
    plan: list[Stage]
    """``evaluate.rollout_stages`` as stages."""
    load_pack: Callable[[], Pack]
    """The scenario pack with the latest calibration, compiled when a challenger's live A/B gates
    are judged (a tick that holds before them, or judges a champion, compiles none)."""


def resolve_rollout(ctx: StepContext, request: RolloutRequest | None = None) -> RolloutSetup:
    """The :class:`RolloutSetup` of ``request`` in the run of ``ctx``."""
    rollout = (request or RolloutRequest()).settings(ctx.config.rollout)
    settings = ctx.config.evaluate
    return RolloutSetup(rollout, settings, rollout_plan(settings), ctx.load_pack)


def rollout_step(ctx: StepContext, request: RolloutRequest | None = None) -> RolloutTick:
    """One roll-out tick for the run key (see the module docstring), with ``request``'s options over
    params ``rollout:``."""
    return rollout_tick(ctx, resolve_rollout(ctx, request))


def rollout_tick(services: StepServices, setup: RolloutSetup) -> RolloutTick:
    """One roll-out tick: under the promotion lock, the challenger moved on its live A/B gates, else
    the champion judged against the one before it; a move is recorded as a ``rollout`` step run."""
    name = policy_model_name(services.scenario)
    path = lock_path(services.local_dir("locks"), str(services.tracker.tracking_uri), name)
    with promotion_lock(path, setup.evaluate.lock_timeout_s):
        require_key(services.tracker, name)  # another key than the deployment's tags and moves nothing
        aliases = services.tracker.aliases(name)
        challenger, champion = aliases.get(CHALLENGER), aliases.get(CHAMPION)
        if challenger is not None and challenger != champion:
            move = advance_challenger(services, setup, challenger, champion)
        elif champion is not None:
            move = judge_champion(services, setup, champion)
        else:
            move = RolloutMove(None, HELD, "no champion and no challenger: the rule engine serves")
    if move.action != HELD and not services.dry_run:
        _record(services, move)
    return RolloutTick(
        services.scenario, services.run_key, services.dry_run, move, services.tracker.get_alias(name, CHAMPION)
    )


def advance_challenger(services: StepServices, setup: RolloutSetup, version: str, champion: str | None) -> RolloutMove:
    """Advance, finish, withdraw or hold the staged ``version`` on its live A/B gates."""
    cfg = setup.rollout
    name = policy_model_name(services.scenario)
    if services.tracker.alias_written_by_rlops(name, CHALLENGER) != version:
        reason = (
            f"v{version} is challenger but rlops did not stage it (the alias was set outside rlops, "
            "without rlops' signed record): withdrawn unjudged, share 0; a challenger set in the MLflow "
            "UI is a promotion request, put through every gate by the webhook first"
        )
        if not services.dry_run:
            withdraw_challenger(services, version, reason)
        return RolloutMove(version, WITHDRAWN, reason, 0.0)
    tags = services.tracker.model_version_tags(name, version)
    share = float(tags.get(TRAFFIC_TAG) or 0.0)
    plan = setup.plan
    stage = current_stage(plan, tags)
    if stage is None:  # a stage the plan does not name (the plan changed since): judged as it serves
        stage = Stage(-1, share, tags.get(T.VERSION.TRAFFIC_SEGMENT) or None)
    where = stage.describe()
    settings = setup.evaluate
    window_h = settings.ab_window_hours
    started = tags.get(T.ROLLOUT_STAGE_STARTED)
    if started:
        served_min = (services.key.end - datetime.fromisoformat(started)).total_seconds() / 60.0
        if served_min < cfg.min_stage_minutes:
            return RolloutMove(
                version,
                HELD,
                f"stage {where} has served {max(served_min, 0):.0f} of {cfg.min_stage_minutes:g} minutes",
                share,
            )
        window_h = min(window_h, served_min / 60.0)
    # A stage serving its whole segment leaves no request of it to the champion meanwhile: its
    # control is the segment's traffic of the same length of time before the stage began.
    before = datetime.fromisoformat(started) if started and stage.segment and stage.share >= 1.0 else None
    gates, note = live_ab_gates(services, setup.load_pack(), version, settings, window_h, stage.segment, before)
    rows = tuple(g.to_dict() for g in gates)
    if not gates or any(g.skipped for g in gates):
        return RolloutMove(version, HELD, f"live A/B gates not judged yet: {note}", share, rows)
    failed = [g.gate for g in gates if not g.passed]
    if failed:
        reason = f"live A/B gate(s) failed at {where}: {', '.join(failed)} ({note})"
        if not services.dry_run:
            withdraw_challenger(services, version, reason)
        return RolloutMove(version, WITHDRAWN, reason, 0.0, rows)
    nxt = next_stage(plan, stage if stage.index >= 0 else None)
    if stage.index < 0:  # off the plan: on to its first stage (a share plan: its first share above this one)
        above = [s for s in plan if s.segment is None and s.share > share + 1e-9]
        nxt = plan[0] if segmented(plan) else (above[0] if above else plan[-1])
    if not nxt.final:
        eta = champion_eta(plan, nxt, cfg.min_stage_minutes)
        reason = f"live A/B gates pass at {where} ({note}); advanced to {nxt.describe()}; {eta}"
        if not services.dry_run:
            stage_challenger(services, version, nxt.share, reason, nxt)
        return RolloutMove(version, ADVANCED, reason, nxt.share, rows, nxt.segment)
    if services.tracker.get_alias(name, CHAMPION) != champion:
        return RolloutMove(version, HELD, "the champion moved during the check; judged again next run", share, rows)
    reason = f"live A/B gates pass at {where} ({note}); v{version} is the champion"
    if not services.dry_run:
        finish(services, version, reason)
    return RolloutMove(version, FINISHED, reason, 1.0, rows)


def judge_champion(services: StepServices, setup: RolloutSetup, champion: str) -> RolloutMove:
    """Roll back ``champion`` when its live return falls below the previous champion's."""
    cfg = setup.rollout
    history = [v for v in champion_history(services.tracker, policy_model_name(services.scenario)) if v != champion]
    if not history:
        return RolloutMove(champion, HELD, "no earlier champion to compare with")
    previous = history[-1]
    start, end = services.key.lookback(cfg.regression_window_hours)
    recalibrated = _recalibrations(services, start, end)
    if recalibrated:
        return RolloutMove(
            champion,
            HELD,
            f"the sandbox was recalibrated in the window ({', '.join(recalibrated)}): "
            "live returns before and after are not comparable",
        )
    returns = live_returns(services.traces.read(services.scenario, (start, end)), services.scenario)
    now, before = returns.get(champion), returns.get(previous)
    if now is None or before is None or min(len(now), len(before)) < cfg.regression_min_episodes:
        return RolloutMove(
            champion,
            HELD,
            f"too few live episodes to compare v{champion} with v{previous} "
            f"({0 if now is None else len(now)} / {0 if before is None else len(before)}"
            f", need {cfg.regression_min_episodes} each)",
        )
    gates = setup.evaluate
    scale = return_scale(float(before.mean()), float(before.std(ddof=1)), gates.scale_floor)
    margin = gates.segment_tolerance * scale
    drop = float(before.mean() - now.mean())
    se = float((before.var(ddof=1) / len(before) + now.var(ddof=1) / len(now)) ** 0.5)
    facts = (
        f"live return v{champion} {now.mean():.4f} (n={len(now)}) vs v{previous} {before.mean():.4f} "
        f"(n={len(before)}): drop {drop:.4f}, margin {margin:.4g} ({share_text(gates.segment_tolerance)} of "
        f"{scale:.4g}), 3 SE {3 * se:.4f}"
    )
    if not (drop > margin and drop > 3 * se):
        return RolloutMove(champion, HELD, facts)
    reason = f"rolled back: {facts}"
    if not services.dry_run:
        rollback(services, reason)
    return RolloutMove(champion, ROLLED_BACK, reason)


def live_returns(traces: pd.DataFrame, scenario: str) -> dict[str, pd.Series]:
    """Per-episode live return of each registry version (by bare version number) in ``traces``. An
    episode still awaiting its late outcome (``outcome_status`` censored) has no final return yet
    and is left out: the newer champion's recent episodes would be compared without their outcome
    against the older one's with it."""
    if traces.empty or "policy_version" not in traces:
        return {}
    traces = settled(traces)
    if "source" in traces:
        traces = traces[traces["source"].fillna("live").astype(str).eq("live")]

    def version(text: Any) -> str | None:
        try:
            return PolicyRef.parse(str(text), scenario).version
        except UserError:
            return None

    names = {v: version(v) for v in traces["policy_version"].dropna().unique()}
    per_episode = (
        traces.assign(version=traces["policy_version"].map(names))
        .dropna(subset=["version"])
        .groupby(["version", "episode_id"])["reward_total"]
        .sum()
    )
    return {str(v): per_episode.loc[v].astype(float) for v in per_episode.index.get_level_values(0).unique()}


def _recalibrations(ctx: StepServices, start: datetime, end: datetime) -> list[str]:

    found = []
    for uri in ctx.storage.list(ctx.uri("calibrations", ctx.scenario), suffix=".json"):
        stem = uri.rsplit("/", 1)[-1][: -len(".json")]
        try:
            key = RunKey.parse(stem)
        except Exception:  # noqa: BLE001 - latest.json and other files are not versions
            continue
        if start < key.end <= end:
            found.append(stem)
    return found


def _record(ctx: StepServices, move: RolloutMove) -> None:

    try:
        with step_run(
            ctx,
            T.ROLLOUT,
            label=f"v{move.version}",
            extra_tags={T.CANDIDATE: str(move.version), T.ROLLOUT_ACTION: move.action},
        ) as run:
            run.log_params({"reason": move.reason[:500], "action": move.action})
            run.log_metrics({"traffic_fraction": float(move.traffic_fraction or 0.0)}, step=0)
    except TrackingError:  # the move stands; the version's own tags carry the reason
        pass
