"""Where the low scores come from: the audit report's attribution of sparse outcomes.

When traces carry an episode-level ``outcome`` column (e.g. a customer-satisfaction flag known only
at the end), the outcome is distributed over the episode's steps by the reward model's per-step
scores (the relabel step's labels for the run key; the scripted reward when there are none), see
:func:`rlops.model.credit_assignment.distribute_outcome`. The lowest-credit steps (bottom quantile,
negative) are then counted by state cluster, action and the reward component (with its rule)
that scored the step worst: "72% of low scores come from component X / rule Y / action Z in state
cluster C".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from rlops.common.step_result import StepResult
from rlops.data_contracts.shapes import read_breakdown
from rlops.model.credit_assignment import distribute_outcome
from rlops.pipeline_steps.infra.html import html_table

if TYPE_CHECKING:
    from rlops.sandbox.pack import Pack

LOW_QUANTILE = 0.2


def episode_outcomes(df: pd.DataFrame, column: str = "outcome") -> tuple[np.ndarray, np.ndarray] | None:
    """``(episode index per row, outcome per episode)``; None when no row carries an outcome.
    An episode's outcome is its last non-null value (0 when it has none)."""
    if column not in df.columns or df[column].isna().all():
        return None
    codes, uniques = pd.factorize(df["episode_id"].astype(str))
    vals = pd.to_numeric(df[column], errors="coerce")
    last = vals.groupby(codes).last().reindex(range(len(uniques))).fillna(0.0)
    return codes, last.to_numpy(np.float64)


def worst_component(df: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Per row, the breakdown component with the lowest score and its rule ref ("—" when none)."""
    comps, rules = [], []
    for text in df.get("reward_breakdown", pd.Series([None] * len(df))).tolist():
        items = read_breakdown(text)
        worst = min(items, key=lambda b: float(b["score"]), default=None)
        if worst is not None and float(worst["score"]) < 0:
            comps.append(worst["component"])
            rules.append(worst.get("rule_ref") or "—")
        else:
            comps.append("—")
            rules.append("—")
    return comps, rules


@dataclass(frozen=True)
class LowScoreSource:
    """One place the low-credit steps gather: a reward component and its rule, an action, a state cluster."""

    share: float
    """Its share of the low-credit steps."""
    component: str
    """The reward component that scored those steps worst ("—": none scored below 0)."""
    rule_ref: str
    action: str
    cluster: int
    sentence: str
    """The finding in words, as the report shows it."""


@dataclass(frozen=True)
class Attribution(StepResult):
    """The attribution section of the audit report: where the low scores of a sparse outcome come from."""

    episodes: int
    """Episodes carrying an outcome."""
    mean_outcome: float
    score_source: str
    """What spread the outcome over the steps: the reward model's labels or the scripted reward."""
    low_threshold: float
    """The credit at or below which a step counts as low (the bottom quantile, when negative)."""
    low_steps: int
    lines: list[LowScoreSource]
    """The places the low-credit steps gather most, most first."""


def attribute(
    pack: Pack,
    df: pd.DataFrame,
    scores: np.ndarray | None,
    clusters: np.ndarray,
    score_source: str,
    top: int = 5,
    temperature: float = 1.0,
) -> Attribution | None:
    """The attribution section of the audit report (None when the traces carry no outcome)."""
    eo = episode_outcomes(df)
    if eo is None:
        return None
    codes, outcome = eo
    s = scores if scores is not None else pd.to_numeric(df["reward_total"], errors="coerce").fillna(0.0).to_numpy()
    credit = distribute_outcome(
        torch.tensor(s, dtype=torch.float32),
        torch.from_numpy(codes),
        torch.tensor(outcome, dtype=torch.float32),
        temperature,
    ).numpy()
    cut = float(np.quantile(credit, LOW_QUANTILE))
    low = (credit <= cut) & (credit < 0)
    comps, rules = worst_component(df)
    frame = pd.DataFrame(
        {"cluster": clusters, "action": df["action"].astype(str).to_numpy(), "component": comps, "rule_ref": rules}
    )[low]
    lines = []
    if len(frame):
        grouped = frame.value_counts(["component", "rule_ref", "action", "cluster"]).head(top)
        for (comp, rule, action, cluster), n in grouped.items():
            share = n / len(frame)
            lines.append(
                LowScoreSource(
                    share=round(float(share), 4),
                    component=comp,
                    rule_ref=rule,
                    action=action,
                    cluster=int(cluster),
                    sentence=f"{share:.0%} of low scores come from component {comp} / rule {rule} / "
                    f"action {action} in state cluster {int(cluster)}",
                )
            )
    return Attribution(
        episodes=int(len(outcome)),
        mean_outcome=float(outcome.mean()),
        score_source=score_source,
        low_threshold=cut,
        low_steps=int(low.sum()),
        lines=lines,
    )


def render(section: dict[str, Any] | None) -> str:

    if not section:
        return ""
    return (
        f"<h2>Where the low scores come from</h2><p>{section['episodes']:,} episodes carry an outcome (mean "
        f"{section['mean_outcome']:.3g}); it is spread over their steps by {section['score_source']}. "
        f"{section['low_steps']:,} steps got credit ≤ {section['low_threshold']:.3g}:</p><ul>"
        + "".join(f"<li>{ln['sentence']}</li>" for ln in section["lines"])
        + "</ul>"
        + html_table(section["lines"], ["share", "component", "rule_ref", "action", "cluster"])
    )
