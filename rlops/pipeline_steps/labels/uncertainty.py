"""Whose uncertainty the label queue measures, and which trace rows it cannot use (and why).

A trace row carries the entropy of the policy that decided it. Rows decided by the rule engine
(``policy_version == "rules"``, or a fallback) carry none. When the window holds rows of a learned
policy, their recorded entropy is used and the rule-engine rows are excluded, with that reason.
When it holds none — before any champion exists, or while every request fell back — the queue
still has work: the entropy of a registered policy (the champion, else the newest candidate; or
the version ``label_queue.uncertainty_policy`` names) is computed on the rule-engine rows'
observations, and the result says which policy's uncertainty was used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from rlops.model.masked_distributions import masked_entropy
from rlops.pipeline_steps.infra.policy_loader import load_policy_ref
from rlops.registry.client import CHAMPION, policy_model_name
from rlops.registry.versions import latest_model_version
from rlops.trace_store.states import observations_from_traces

if TYPE_CHECKING:
    from rlops.model.policy import PolicyNetwork
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack

RULES = "rules"
EXCLUDED_RULE_ENGINE = "decided by the rule engine (no policy entropy recorded)"
EXCLUDED_FALLBACK = "served by the rule-engine fallback (no policy entropy recorded)"
EXCLUDED_SCENARIO = "trace of another scenario"
EXCLUDED_SINGLE = "one legal action only (nothing to choose)"


@dataclass
class UsableRows:
    """Rows the queue judges, whose entropy they carry, and what was left out."""

    rows: pd.DataFrame
    uncertainty_from: str
    excluded: dict[str, int] = field(default_factory=dict)


def split_rows(df: pd.DataFrame, scenario: str) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, int]]:
    """``(learned rows, rule-engine rows, excluded counts)`` of the window's traces."""
    excluded: dict[str, int] = {}
    if df.empty:
        return df, df, excluded
    if "scenario" in df.columns:
        other = df["scenario"] != scenario
        if bool(other.any()):
            excluded[EXCLUDED_SCENARIO] = int(other.sum())
            df = df[~other].reset_index(drop=True)
    if "policy_version" not in df.columns:
        return df, df.iloc[0:0], excluded
    rules = df["policy_version"].astype(str) == RULES
    fallback = (
        df["fallback"].fillna(False).astype(bool) if "fallback" in df.columns else pd.Series(False, index=df.index)
    ) & ~rules
    learned = ~rules & ~fallback
    counts = {EXCLUDED_RULE_ENGINE: int(rules.sum()), EXCLUDED_FALLBACK: int(fallback.sum())}
    if bool(learned.all()):  # no copy of a window that is all learned-policy rows (a day is millions)
        return df.reset_index(drop=True), df.iloc[0:0], excluded
    return (
        df[learned].reset_index(drop=True),
        df[~learned].reset_index(drop=True),
        {**excluded, **{k: v for k, v in counts.items() if v}},
    )


def uncertainty_policy(ctx: StepServices, setting: str = "auto") -> tuple[str | None, PolicyNetwork | None]:
    """``(description, policy)`` whose entropy scores rule-engine rows: ``auto`` = the champion,
    else the newest registered candidate; ``none`` = never; a version number = that version."""
    if setting == "none":
        return None, None
    name = policy_model_name(ctx.scenario)
    if setting != "auto":
        return f"{name} v{setting} (label_queue.uncertainty_policy)", load_policy_version(ctx, str(setting))
    champion = ctx.tracker.get_alias(name, CHAMPION)
    if champion is not None:
        return f"champion {name} v{champion}", load_policy_version(ctx, champion)
    latest = latest_model_version(ctx.tracker, name)
    if latest is None:
        return None, None
    return f"latest candidate {name} v{latest} (no champion yet)", load_policy_version(ctx, latest)


def load_policy_version(ctx: StepServices, version: str) -> PolicyNetwork:
    """The network of a registered policy (any spelling :mod:`rlops.common.policy_ref` accepts)."""
    loaded = load_policy_ref(ctx, version)
    if loaded is None:
        raise ValueError(f"label_queue.uncertainty_policy {version!r}: that alias is not set")
    return loaded.network


def policy_entropy(pack: Pack, policy: PolicyNetwork, df: pd.DataFrame) -> np.ndarray:
    """The policy's masked entropy (nats) on each row's rebuilt observation."""
    import torch

    obs, masks = observations_from_traces(pack, df)
    policy = policy.to("cpu").eval()
    with torch.no_grad():
        logp, _ = policy(obs, masks)
        return masked_entropy(logp, masks).numpy().astype(np.float64)


def usable_rows(ctx: StepServices, pack: Pack, df: pd.DataFrame, setting: str = "auto") -> UsableRows:
    """The rows to judge and whose uncertainty they carry (see the module docstring)."""
    learned, rule_rows, excluded = split_rows(df, ctx.scenario)
    who: str | None
    if not learned.empty or rule_rows.empty:
        versions = sorted(learned["policy_version"].astype(str).unique()) if "policy_version" in learned else []
        who = (
            "no rows"
            if learned.empty
            else "recorded entropy" + (" of policy version(s) " + ", ".join(versions) if versions else "")
        )
        return UsableRows(learned, who, excluded)
    who, policy = uncertainty_policy(ctx, setting)
    if policy is None:
        return UsableRows(learned, "none: no learned policy decided these steps and none is registered", excluded)
    for key in (EXCLUDED_RULE_ENGINE, EXCLUDED_FALLBACK):
        excluded.pop(key, None)  # scored by the registered policy instead
    assert who is not None
    return UsableRows(rule_rows.assign(entropy=policy_entropy(pack, policy, rule_rows)), who, excluded)


def count_single_choice(df: pd.DataFrame) -> int:
    if df.empty or "action_mask" not in df.columns:
        return 0
    return int((df["action_mask"].astype(str).str.count("1") < 2).sum())


__all__ = [
    "UsableRows",
    "split_rows",
    "uncertainty_policy",
    "policy_entropy",
    "usable_rows",
    "count_single_choice",
    "EXCLUDED_RULE_ENGINE",
    "EXCLUDED_FALLBACK",
    "EXCLUDED_SCENARIO",
    "EXCLUDED_SINGLE",
]
