"""The live A/B gates of a candidate from captured traffic: the episodes its ``challenger`` group
served against the ``champion``/``control`` group's of the same window (of one roll-out stage's
segment, when the stage names one), judged by :func:`~rlops.pipeline_steps.promotion.gates.ab_gates`.
Before a pack's first champion the incumbent is the rule engine, which the policy client serves as
group ``fallback`` with reason ``no_champion``: those rows are the control when the window holds
no ``champion``/``control`` row (:func:`control_rows`).

The evaluation (:mod:`rlops.pipeline_steps.promotion.evaluate`) and the roll-out step
(:mod:`rlops.pipeline_steps.promotion.rollout`) read them alike.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rlops.agent_sdk.serving import FALLBACK
from rlops.common.errors import UserError
from rlops.common.policy_ref import canonical_policy
from rlops.pipeline_steps.promotion.gates import Gate, GateConfig, ab_gates, episode_outcomes
from rlops.pipeline_steps.promotion.stages import segment_episodes

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack

#: The fallback reason code (``FALLBACK_CODES``) of a decision the rule engine made because no
#: champion was promoted yet: the incumbent's own decision, not a champion's failure.
NO_CHAMPION = "no_champion"


def control_rows(traces: pd.DataFrame) -> pd.DataFrame:
    """The incumbent's rows of ``traces``: groups ``champion``/``control``; in a window without
    any, the rule engine's decisions served for want of a champion (group ``fallback``, reason
    ``no_champion``), which a pack's first challenger is judged against. Other fallbacks (a
    champion that timed out, failed to load…) are no one's control."""
    group = traces["test_group"].fillna("").astype(str)
    incumbent = traces[group.isin(["champion", "control"])]
    if not incumbent.empty or "fallback_reason" not in traces:
        return incumbent
    reason = traces["fallback_reason"].fillna("").astype(str)
    return traces[group.eq(FALLBACK) & reason.str.startswith(f"{NO_CHAMPION}:")]


def live_ab_gates(
    ctx: StepServices,
    pack: Pack,
    candidate: str,
    cfg: GateConfig,
    window_hours: float,
    segment: str | None = None,
    control_before: datetime | None = None,
) -> tuple[list[Gate], str]:
    """A/B gates from captured traces of the last ``window_hours`` before the run key: episodes
    of group ``challenger`` served by the candidate against groups ``champion``/``control``; with a
    ``segment`` (a roll-out stage's), the episodes of that segment only, on both sides. With
    ``control_before`` (a stage that serves its whole segment, so no request of it is the
    champion's meanwhile) the control episodes are those of the same length of time before it.
    Trace rows name their policy in any form :class:`~rlops.common.policy_ref.PolicyRef` reads
    (``7``, ``credit_approval-policy/7``…); they are compared by canonical text, never raw."""
    traces = ctx.traces.read(ctx.scenario, ctx.key.lookback(window_hours))
    if control_before is not None:
        before = ctx.traces.read(ctx.scenario, (control_before - timedelta(hours=window_hours), control_before))
        if not before.empty and "test_group" in before:  # only its control rows: the challenger's are this stage's
            before = control_rows(before)
            if "test_group" in traces:
                traces = traces[traces["test_group"].fillna("").astype(str).eq("challenger")]
            traces = pd.concat([traces, before], ignore_index=True)
    if traces.empty:
        return [], "no captured traces in the window"
    if "source" in traces:  # sandbox rollouts in the store are not live traffic
        traces = traces[traces["source"].fillna("live").astype(str).eq("live")]
    if "test_group" not in traces:
        return [], "captured traces carry no test_group"
    group = traces["test_group"].fillna("").astype(str)
    if "policy_version" in traces:
        wanted = canonical_policy(candidate, ctx.scenario)
        served_by = traces["policy_version"].map(lambda v: _canonical_or_none(v, ctx.scenario))
        by_candidate = served_by.eq(wanted)
    else:
        by_candidate = pd.Series(True, index=traces.index)
    served = traces.loc[group.eq("challenger") & by_candidate, "episode_id"].unique()
    ch_rows = traces[group.eq("challenger") & traces["episode_id"].isin(served)]
    ctl_rows = control_rows(traces)
    where = ""
    if segment is not None:
        inside = segment_episodes(pack, pd.concat([ch_rows, ctl_rows]), segment)
        ch_rows = ch_rows[ch_rows["episode_id"].astype(str).isin(inside)]
        ctl_rows = ctl_rows[ctl_rows["episode_id"].astype(str).isin(inside)]
        where = f" in segment {segment}"
    if ch_rows.empty or ctl_rows.empty:
        return [], f"no live A/B traffic for this candidate{where}"
    takeover = {a.name for a in pack.scenario.spec.actions if a.human_takeover}
    return ab_gates(episode_outcomes(ch_rows, takeover), episode_outcomes(ctl_rows, takeover), cfg), (
        f"{ch_rows['episode_id'].nunique()} challenger / {ctl_rows['episode_id'].nunique()} control episodes{where}"
    )


@functools.lru_cache(maxsize=4096)
def _canonical_or_none(text: Any, scenario: str) -> str | None:
    """The canonical policy a trace row names; None for a missing or unreadable value (or
    another scenario's policy), which then matches no candidate."""
    if text is None or (isinstance(text, float) and np.isnan(text)):
        return None
    try:
        return canonical_policy(str(text), scenario)
    except UserError:
        return None
