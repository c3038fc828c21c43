"""The stages of a staged roll-out, and the segment of traffic each one serves.

``evaluate.rollout_stages`` is either a list of shares of all traffic (``[0.05, 0.15, 1.0]``) or a
list of stages that name a segment of requests — an expression over observable state fields
(:mod:`rlops.sandbox.segments`) — and the share of that segment's request keys the challenger
serves::

    rollout_stages:
      - {segment: "user_profile.region == 'guangdong'", share: 1.0}
      - {segment: "user_profile.region in ['jiangsu', 'zhejiang', 'shanghai']", share: 1.0}
      - {segment: null, share: 1.0}            # everyone: the challenger becomes champion

The challenger's version carries the stage it serves (``rlops.rollout.stage``), its share
(``traffic_fraction``) and its segment (``traffic_segment``); the policy client serves the
challenger only to requests whose state is in the segment, and each stage is judged by the live
A/B gates on that segment's episodes only (:func:`segment_episodes`). Each stage below 100 % serves
at least ``rollout.min_stage_minutes``: :func:`champion_eta` says how long a roll-out takes at the least.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlops.common.errors import UserError
from rlops.common.params_promotion import RolloutStage
from rlops.registry import tags as T
from rlops.sandbox.errors import ExprError
from rlops.sandbox.segments import compile_segment

if TYPE_CHECKING:
    import pandas as pd

    from rlops.common.params_promotion import EvaluateParams
    from rlops.sandbox.pack import Pack


@dataclass(frozen=True)
class Stage:
    """One stage of the plan."""

    index: int
    share: float
    segment: str | None
    """The segment expression (None: everyone)."""

    @property
    def final(self) -> bool:
        """Everyone at 100 %: reaching it makes the challenger champion."""
        return self.segment is None and self.share >= 1.0

    def describe(self) -> str:
        return f"{self.share:.0%} of " + (f"segment {self.segment}" if self.segment else "traffic")

    def tags(self) -> dict[str, Any]:
        """The version tags that make a policy client serve this stage."""
        return {
            T.VERSION.TRAFFIC_FRACTION: self.share,
            T.VERSION.TRAFFIC_SEGMENT: self.segment or "",
            T.ROLLOUT_STAGE: self.index,
        }


def rollout_plan(settings: EvaluateParams) -> list[Stage]:
    """``evaluate.rollout_stages`` as stages (params validation has compiled their segments
    against the pack: :func:`rlops.common.config.check_rollout_segments`)."""
    return [
        Stage(i, s.share, s.segment) if isinstance(s, RolloutStage) else Stage(i, float(s), None)
        for i, s in enumerate(settings.rollout_stages)
    ]


def segmented(plan: list[Stage]) -> bool:
    return any(s.segment is not None for s in plan)


def current_stage(plan: list[Stage], tags: Mapping[str, str]) -> Stage | None:
    """The stage a challenger's tags say it serves: by index (segment plans), else by share."""
    raw = tags.get(T.ROLLOUT_STAGE)
    if raw is not None and raw.isdigit() and int(raw) < len(plan):
        stage = plan[int(raw)]
        if (stage.segment or "") == tags.get(T.VERSION.TRAFFIC_SEGMENT, ""):
            return stage
    if tags.get(T.VERSION.TRAFFIC_SEGMENT):  # a segment the plan does not name at that index
        return None
    try:
        share = float(tags.get(T.VERSION.TRAFFIC_FRACTION) or 0.0)
    except ValueError:
        return None
    return next((s for s in plan if s.segment is None and not s.final and abs(s.share - share) < 1e-9), None)


def next_stage(plan: list[Stage], current: Stage | None) -> Stage:
    """The stage after ``current`` (the first one when it serves none); the last one stays last."""
    if current is None:
        return plan[0]
    return plan[min(current.index + 1, len(plan) - 1)]


def segment_episodes(pack: Pack, rows: pd.DataFrame, segment: str) -> set[str]:
    """The episodes of trace ``rows`` whose state (their first row) is in ``segment``."""
    from rlops.trace_store.states import states_from_traces

    if rows.empty:
        return set()
    try:
        expr = compile_segment(pack.scenario.spec, segment)
    except ExprError as exc:
        raise UserError(f"evaluate.rollout_stages: {exc} (scenario {pack.name})") from None
    first = rows.sort_values(["episode_id", "step"], kind="stable").drop_duplicates("episode_id")
    inside = expr(states_from_traces(pack, first.reset_index(drop=True))).cpu().numpy().astype(bool)
    return set(first["episode_id"].astype(str).to_numpy()[inside])


def minutes_to_champion_at(plan: list[Stage], stage: Stage, min_stage_minutes: float) -> float:
    """The least time a challenger serving ``stage`` of ``plan`` needs before it can become champion:
    each stage from it up to the last one below 100 % serves at least ``min_stage_minutes`` (and
    moves on only when its live A/B gates pass on enough episodes)."""
    return sum(1 for s in plan[stage.index :] if not s.final) * float(min_stage_minutes)


def champion_eta(plan: list[Stage], stage: Stage, min_stage_minutes: float) -> str:
    """``it can become champion in ≥ 120 min …`` for a challenger serving ``stage`` of ``plan`` (for
    reasons and logs)."""
    minutes = minutes_to_champion_at(plan, stage, min_stage_minutes)
    return (
        f"it can become champion in {minutes:g} min at the earliest (rollout.min_stage_minutes per stage, "
        f"each stage's live A/B gates passing on evaluate.ab_min_episodes episodes per group)"
    )
