"""``rlops replay --trace-id ID [--depth N]``: why did the agent do what it did at this step?

Finds the episode holding the trace id in the trace store and gives its decision path up to that
step (the last ``depth`` steps when given): each step's visible state, the legal actions, the
action probabilities and the reward breakdown. Probabilities are recomputed with the policy
version recorded in the row when that version can be loaded (a registered version of
``<scenario>-policy`` or a saved policy folder); otherwise only the chosen action's probability is
known, from ``logp``. The per-cluster audit of a whole window is :mod:`rlops.pipeline_steps.audit.report`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.errors import RlopsError, UserError
from rlops.common.policy_ref import PolicyRef
from rlops.common.step_result import StepResult
from rlops.data_contracts.shapes import read_breakdown
from rlops.pipeline_steps.audit.rows import screen_rows
from rlops.pipeline_steps.infra.policy_loader import load_policy_ref
from rlops.trace_store.states import STATE_PREFIX, mask_matrix, observations_from_traces

if TYPE_CHECKING:  # numpy, pandas, torch are imported where they run: registering the CLI stays light
    import numpy as np
    import pandas as pd

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack
    from rlops.trace_store.query import TraceReader


@dataclass(frozen=True)
class ReplayStep:
    """One step of a decision path: what the agent saw, could do, chose and earned."""

    step: int
    trace_id: str
    ts: str
    state: dict[str, Any]
    """The visible state fields that have a value, without the ``state`` column prefix."""
    legal: list[str]
    action: str
    probabilities: dict[str, float]
    """Per legal action its probability; only the chosen action's when the policy cannot be loaded."""
    probability_source: str
    """Recomputed with the recorded policy version, or why only ``logp`` is known."""
    reward_total: float | None
    breakdown: list[dict[str, Any]]
    """The reward components as the row holds them: ``{component, score, reason, rule_ref}``."""
    latency_ms: float | None
    error: str | None
    done: bool | None


@dataclass(frozen=True)
class DecisionPath(StepResult):
    """The decision path of one trace's episode, up to the trace's step."""

    trace_id: str
    episode_id: str
    policy_version: str
    episode_steps: int
    shown_steps: int
    rows_skipped: list[str]
    """One reason per row of the episode that does not fit the pack (left out)."""
    episode_return: float
    steps: list[ReplayStep]


def find_episode(reader: TraceReader, uri: str, trace_id: str) -> pd.DataFrame:
    """All rows of the episode(s) holding ``trace_id``, sorted by episode and step: a lookup by id
    that reads only the row groups whose bloom filter may hold it."""
    try:
        return reader.episode_rows(uri, trace_id)
    except LookupError as exc:
        raise ValueError(str(exc).strip("'\"")) from None


def decision_path(
    ctx: StepServices, pack: Pack, rows: pd.DataFrame, trace_id: str, depth: int | None = None
) -> DecisionPath:
    """The steps of ``trace_id``'s episode up to its (last) matching step, at most ``depth`` of them."""
    import numpy as np
    import pandas as pd

    ep = str(rows.loc[rows["trace_id"].astype(str) == trace_id, "episode_id"].iloc[-1])
    episode, skipped = screen_rows(pack, rows[rows["episode_id"].astype(str) == ep])
    # the store sorted the steps as it holds them: as text when any file holds them as text
    episode = episode.sort_values("step", kind="stable").reset_index(drop=True)
    if not (episode["trace_id"].astype(str) == trace_id).any():
        raise UserError(f"replay --trace-id {trace_id}: its stored row cannot be replayed: {skipped[0]}")
    focus = int(episode.loc[episode["trace_id"].astype(str) == trace_id, "step"].max())
    shown = episode[episode["step"] <= focus]
    if depth is not None:
        shown = shown.tail(max(int(depth), 1))
    probs, source = _probabilities(ctx, pack, episode)
    names = pack.scenario.action_names
    masks = mask_matrix(episode["action_mask"], pack.scenario.n_actions)
    steps = []
    for i in shown.index:
        r = episode.loc[i]
        state = {
            c[len(STATE_PREFIX) :]: _plain(r[c])
            for c in episode.columns
            if c.startswith(STATE_PREFIX) and not _missing(r[c])
        }
        if probs is not None:
            p = {names[a]: round(float(probs[i, a]), 4) for a in np.flatnonzero(masks[i])}
        else:
            p = {str(r["action"]): round(math.exp(float(r["logp"])), 4)} if not _missing(r.get("logp")) else {}
        bd = read_breakdown(r.get("reward_breakdown"))  # a row of no known shape shows no breakdown
        steps.append(
            ReplayStep(
                step=int(r["step"]),
                trace_id=str(r["trace_id"]),
                ts=str(r.get("ts")),
                state=state,
                legal=[names[a] for a in np.flatnonzero(masks[i])],
                action=str(r["action"]),
                probabilities=p,
                probability_source=source,
                reward_total=_plain(r.get("reward_total")),
                breakdown=bd,
                latency_ms=_plain(r.get("latency_ms")),
                error=_plain(r.get("error")),
                done=_plain(r.get("done")),
            )
        )
    return DecisionPath(
        trace_id=trace_id,
        episode_id=ep,
        policy_version=str(episode["policy_version"].iloc[0]),
        episode_steps=len(episode),
        shown_steps=len(steps),
        rows_skipped=skipped,
        episode_return=float(pd.to_numeric(episode["reward_total"], errors="coerce").sum()),
        steps=steps,
    )


def _probabilities(ctx: StepServices, pack: Pack, episode: pd.DataFrame) -> tuple[np.ndarray | None, str]:
    import torch

    version = str(episode["policy_version"].iloc[0])
    try:
        ref = PolicyRef.parse(version, ctx.scenario) if not Path(version).is_dir() else Path(version)
    except RlopsError:
        return None, f"logp of the chosen action (policy {version!r} is not a registered policy)"
    if isinstance(ref, PolicyRef) and ref.is_rules:
        return None, "logp of the chosen action (served by the rule engine, which has no network)"
    try:
        loaded = load_policy_ref(ctx, ref)
    except Exception:  # noqa: BLE001 - deleted or unreachable: show the recorded logp instead
        loaded = None
    if loaded is None:
        return None, "logp of the chosen action (policy version not loadable)"
    policy = loaded.network
    obs, masks = observations_from_traces(pack, episode)
    with torch.no_grad():
        logp, _ = policy(obs, masks)
    return logp.exp().numpy(), f"recomputed with policy version {version}"


def render_path(path: DecisionPath) -> str:
    """The decision path as the text ``rlops replay`` prints."""
    lines = [
        f"episode {path.episode_id} (policy {path.policy_version}), steps {path.shown_steps} of "
        f"{path.episode_steps}, episode return {path.episode_return:.4f}"
    ]
    for s in path.steps:
        lines.append(f"\nstep {s.step}  trace {s.trace_id}  action {s.action}  reward {s.reward_total}")
        lines.append("  state: " + ", ".join(f"{k}={v}" for k, v in s.state.items()))
        lines.append("  legal: " + ", ".join(s.legal))
        lines.append(
            "  probabilities: "
            + ", ".join(f"{k} {v:.3f}" for k, v in sorted(s.probabilities.items(), key=lambda kv: -kv[1]))
            + f"  ({s.probability_source})"
        )
        for b in s.breakdown:
            lines.append(
                f"    {b['score']:+.4f}  {b['component']:<18} {b.get('reason') or ''} [{b.get('rule_ref') or '-'}]"
            )
    return "\n".join(lines)


def replay(ctx: StepContext, trace_id: str, depth: int | None = None, traces_uri: str | None = None) -> DecisionPath:
    """The decision path of ``trace_id`` in the scenario's trace store (or under ``traces_uri``)."""
    pack = ctx.load_pack()
    rows = find_episode(ctx.traces.reader, traces_uri or ctx.traces.scenario_uri(ctx.scenario), trace_id)
    return decision_path(ctx, pack, rows, trace_id, depth)


def _missing(v: Any) -> bool:
    import pandas as pd

    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def _plain(v: Any) -> Any:
    if _missing(v):
        return None
    return v.item() if hasattr(v, "item") and not isinstance(v, (str, bytes)) else v
