"""The reward a generated pack starts with: one fitted placeholder component per logged component.

Trace rows carry the reward breakdown (component, score, reason, rule ref). Each component becomes
a reward component with the same name, reason and rule ref whose body reproduces what it paid: a
linear function of the step's latency when that explains at least :data:`LATENCY_R2` of its variance
(a handling-time cost), else per action a shallow regression tree (:mod:`rlops.pack_init.cart`) of
its scores on the state fields visible on every step of that action. Evidence decides how far a fit
goes: a split needs :data:`MIN_EVENTS` paid scores on each side, and a component paid fewer than
:data:`THIN_EVENTS` times has its means shrunk toward its overall mean and is marked thin evidence.
The module says, at each body, that the expert must replace it with the rule itself
(``# TODO(expert)``), and rules.yaml gets one placeholder clause per rule ref.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from rlops.data_contracts.shapes import read_breakdown
from rlops.pack_init.actions import SupportPath, error_column
from rlops.pack_init.cart import Node, Split, fit_tree, leaves, number_text, predict
from rlops.pack_init.fields import IDENTIFIER, FieldGuess

if TYPE_CHECKING:
    import pandas as pd

NOT_COMPONENTS = ("repeat_penalty", "clip")
LATENCY_R2 = 0.9
TREE_DEPTH = 3
MIN_GAIN = 0.02
"""A split must remove this share of its tree's squared error: smaller ones chase noise."""
MIN_EVENTS = 10
"""Each side of a split must hold this many paid (non-zero) scores; and a thin component's means
are shrunk toward its mean with the weight of the rows that would hold this many at its rate (42
clicks over 10,000 visits cannot tell 80 items apart)."""
THIN_EVENTS = 100
"""Fewer paid scores than this: the README and ``rlops init`` warn that the fit is thin evidence."""


@dataclass(frozen=True)
class ActionFit:
    """What a component paid on one action's steps, as a tree over the state."""

    action: str
    tree: Node
    unless_error: bool = False
    """The component pays nothing when the action's call failed (fitted on the successful steps)."""
    state: tuple[tuple[str, str, str | bool], ...] = ()
    """The process state (``(field, type, value)`` of the fields effects set) the fit applies in."""
    support: tuple[SupportPath, ...] = ()
    """Where the action was logged; outside it the component pays :attr:`outside` (empty: everywhere)."""

    @property
    def outside(self) -> float:
        """What the component pays where the action was never logged: its least favourable fitted
        value, and never more than 0 (nothing in the traces says the action earns anything there)."""
        return min(0.0, min(leaf.value for leaf in leaves(self.tree)))


@dataclass(frozen=True)
class ComponentGuess:
    """One reward component of the logged breakdowns and its fitted placeholder."""

    name: str
    reason: str
    rule_ref: str
    rows: int
    """Steps on which it paid a non-zero score."""
    r2: float
    """Share of the variance of its logged scores the placeholder reproduces."""
    latency: tuple[float, float] | None = None
    """``(intercept, per ms)`` when it is a linear function of the step's latency."""
    per_action: tuple[ActionFit, ...] = ()

    @property
    def thin(self) -> bool:
        """Too few paid scores to trust a fit (:data:`THIN_EVENTS`)."""
        return 0 < self.rows < THIN_EVENTS


@dataclass(frozen=True)
class RewardGuess:
    components: tuple[ComponentGuess, ...]
    clip: float
    repeat_penalty: dict[str, object] | None
    """``REPEAT_PENALTY`` when the breakdowns carry a repeat penalty."""
    repeat_rule_title: str = "No busy loops"
    source: str = "reward_breakdown"
    """Where the scores came from: ``reward_breakdown``, ``reward_total`` or ``none``."""


def _rule_id(name: str) -> str:
    return f"{name.upper()}_v0.1"


def infer_reward(
    df: pd.DataFrame, fields: list[FieldGuess], process: list[FieldGuess], support: dict[str, tuple[SupportPath, ...]]
) -> RewardGuess:
    """Components, clip bound and repeat penalty from the rows' reward columns. ``process`` are the
    bool and enum fields the actions set (the state of the process): each component is fitted
    apart in each of their value combinations seen, and pays nothing in one never seen. ``support``
    says where each action was logged: outside it a component pays its least favourable value
    (pessimism where the traces say nothing, so a policy gains nothing from leaving the data)."""
    scores, meta = _scores(df)
    if scores is None:
        return RewardGuess((), 5.0, None, source="none")
    actions = df["action"].astype(str).to_numpy()
    latency = df["latency_ms"].astype(float).to_numpy() if "latency_ms" in df.columns else None
    errors = error_column(df)
    comps = []
    for name, (reason, rule) in meta.items():
        if name in NOT_COMPONENTS or name.startswith(("hook:", "__")) or not IDENTIFIER.match(name):
            continue
        comps.append(
            _fit_component(name, reason, rule, scores[name], actions, errors, latency, fields, process, support)
        )
    totals = df["reward_total"].astype(float).to_numpy() if "reward_total" in df.columns else None
    bound = float(np.nanmax(np.abs(totals))) if totals is not None and np.isfinite(totals).any() else 5.0
    clip = float(math.ceil(max(bound, 1.0) * 1.5))
    repeat = _repeat_penalty(df, scores.get("repeat_penalty"), meta.get("repeat_penalty"))
    return RewardGuess(
        tuple(comps), clip, repeat, source="reward_breakdown" if meta.get("__breakdown__") else "reward_total"
    )


def _scores(df: pd.DataFrame) -> tuple[dict[str, np.ndarray] | None, dict[str, tuple[str, str]]]:
    """``{component: score per row}`` and ``{component: (reason, rule ref)}`` of the breakdowns;
    the total as one ``logged_reward`` component when rows carry no breakdown."""
    n = len(df)
    if "reward_breakdown" in df.columns and df["reward_breakdown"].notna().any():
        cols: dict[str, np.ndarray] = {}
        reasons: dict[str, Counter[str]] = {}
        rules: dict[str, Counter[str]] = {}
        for i, value in enumerate(df["reward_breakdown"].to_numpy()):
            for item in read_breakdown(value):
                name = str(item["component"])
                if name not in cols:
                    cols[name] = np.zeros(n)
                    reasons[name], rules[name] = Counter(), Counter()
                cols[name][i] += float(item["score"])
                if item.get("reason"):
                    reasons[name][str(item["reason"])] += 1
                if item.get("rule_ref"):
                    rules[name][str(item["rule_ref"])] += 1
        if cols:
            meta = {
                k: (
                    reasons[k].most_common(1)[0][0] if reasons[k] else k.replace("_", " "),
                    rules[k].most_common(1)[0][0] if rules[k] else _rule_id(k),
                )
                for k in cols
            }
            meta["__breakdown__"] = ("", "")
            return cols, meta
    if "reward_total" in df.columns and df["reward_total"].notna().any():
        total = df["reward_total"].astype(float).fillna(0.0).to_numpy()
        return {"logged_reward": total}, {
            "logged_reward": ("the reward logged with each step", _rule_id("logged_reward"))
        }
    return None, {}


def _fit_component(
    name: str,
    reason: str,
    rule: str,
    y: np.ndarray,
    actions: np.ndarray,
    errors: np.ndarray,
    latency: np.ndarray | None,
    fields: list[FieldGuess],
    process: list[FieldGuess],
    support: dict[str, tuple[SupportPath, ...]],
) -> ComponentGuess:
    paid = int(np.count_nonzero(y))
    var = float(y.var())
    if latency is not None and np.isfinite(latency).all() and var > 0 and np.all(y != 0):
        slope, intercept = np.polyfit(latency, y, 1)
        r2 = 1.0 - float(np.var(y - (intercept + slope * latency))) / var
        if r2 >= LATENCY_R2:
            return ComponentGuess(name, reason, rule, paid, r2, (float(intercept), float(slope)))
    fits = []
    fitted = np.zeros_like(y)
    # Thin evidence: each mean is shrunk toward the mean over every step (not over the actions that
    # happened to pay: those were picked by luck), weighted by the rows that hold MIN_EVENTS paid
    # scores at the component's rate. A well-evidenced component keeps its means.
    prior = float(y.mean()) if len(y) else 0.0
    weight = MIN_EVENTS * len(y) / max(paid, 1) if 0 < paid < THIN_EVENTS else 0.0
    for action in dict.fromkeys(actions):
        rows = actions == action
        if not np.any(y[rows]):
            continue
        unless_error = bool(errors[rows].any() and not np.any(y[rows & errors]))
        base = rows & ~errors if unless_error else rows
        keys = [f for f in process if not np.isnan(f.data[base]).any()]
        combos = np.stack([f.data[base] for f in keys], axis=1) if keys else np.zeros((int(base.sum()), 0))
        base_idx = np.flatnonzero(base)
        for combo in np.unique(combos, axis=0):
            fit_rows = np.zeros(len(y), dtype=bool)
            fit_rows[base_idx[np.all(combos == combo, axis=1)]] = True
            if not np.any(y[fit_rows]):
                continue  # the component never paid in this state of the process
            n = int(fit_rows.sum())
            feats = [f.feature() for f in fields if f not in keys and not np.isnan(f.data[fit_rows]).any()]
            sub = [type(f)(f.name, f.kind, f.data[fit_rows], f.labels) for f in feats]
            tree = fit_tree(
                sub, y[fit_rows], classify=False, max_depth=TREE_DEPTH, min_leaf=max(20, n // 50), min_gain=MIN_GAIN
            )
            tree = trusted(tree, y[fit_rows], np.arange(n), prior, weight)
            fitted[fit_rows] = predict(tree, n)
            state = tuple(
                (f.path, f.type, f.values[int(v)] if f.type == "enum" else bool(v > 0.5)) for f, v in zip(keys, combo)
            )
            fits.append(ActionFit(str(action), tree, unless_error, state, support.get(str(action), ())))
    r2 = 1.0 - float(np.var(y - fitted)) / var if var > 0 else 1.0
    return ComponentGuess(name, reason, rule, paid, r2, None, tuple(fits))


def trusted(node: Node, y: np.ndarray, idx: np.ndarray, prior: float, weight: float) -> Node:
    """``node`` with the splits whose sides hold fewer than :data:`MIN_EVENTS` paid scores pruned,
    and each leaf's mean shrunk toward ``prior`` with ``weight`` rows: ``(Σy + weight·prior) /
    (n + weight)``."""
    yy = y[idx]
    shrunk = float((yy.sum() + weight * prior) / (len(yy) + weight)) if len(yy) + weight > 0 else prior
    if node.split is None or node.left is None or node.right is None:
        return replace(node, value=shrunk)
    left = node.split.left(node.split.feature.data[idx])
    if min(np.count_nonzero(yy[left]), np.count_nonzero(yy[~left])) < MIN_EVENTS:
        return Node(shrunk, len(idx))
    return replace(
        node,
        left=trusted(node.left, y, idx[left], prior, weight),
        right=trusted(node.right, y, idx[~left], prior, weight),
    )


def _repeat_penalty(
    df: pd.DataFrame, scores: np.ndarray | None, meta: tuple[str, str] | None
) -> dict[str, object] | None:
    """``REPEAT_PENALTY`` from the rows it was charged on: its size, and ``after`` as the fewest
    repeats in a row seen on a charged step."""
    if scores is None or meta is None or not np.any(scores):
        return None
    charged = scores < 0
    actions = df["action"].astype(str).to_numpy()
    ep = df["episode_id"].to_numpy()
    run = np.zeros(len(df), dtype=np.int64)
    for i in range(1, len(df)):
        if ep[i] == ep[i - 1] and actions[i] == actions[i - 1]:
            run[i] = run[i - 1] + 1
    after = int(max(1, run[charged].min())) if charged.any() else 1
    return {"penalty": round(float(-np.median(scores[charged])), 4), "after": after, "rule_ref": meta[1]}


def placeholder_reward(closing_action: str | None) -> RewardGuess:
    """The reward of a pack with no logged reward: a cost per step and, when one action ends a
    case, a bonus for ending it — both for the expert to replace."""
    components = [ComponentGuess("step_cost", "handling cost of a step", "OPS_STEP_COST_v0.1", 0, 0.0, (-0.05, 0.0))]
    if closing_action:
        done = ActionFit(closing_action, Node(1.0, 0), unless_error=True)
        components.append(ComponentGuess("case_closed", "case closed", "CASE_CLOSED_v0.1", 0, 0.0, None, (done,)))
    return RewardGuess(tuple(components), clip=5.0, repeat_penalty=None, source="none")


# --------------------------------------------------------------------------- rendering
def _split_expr(split: Split, left: bool) -> str:
    f = split.feature
    attr = f"s.{f.name}"
    if f.kind in ("int", "float"):
        return f"({attr} {'<' if left else '>='} {number_text(split.threshold)})"
    if f.kind == "enum":
        return f"({attr} {'==' if left else '!='} {f.labels[split.code]!r})"
    return attr if left else f"~{attr}"


def _path_expr(path: SupportPath) -> str:
    return " & ".join(_split_expr(split, left) for split, left in path) or "True"


def _tree_expr(node: Node, indent: int) -> str:
    if node.split is None or node.left is None or node.right is None:
        return f"{node.value:.4g}"
    pad = " " * (indent + 4)
    return (
        f"torch.where(\n{pad}{_split_expr(node.split, True)},\n{pad}{_tree_expr(node.left, indent + 4)},\n"
        f"{pad}{_tree_expr(node.right, indent + 4)},\n{' ' * indent})"
    )


def _body(c: ComponentGuess) -> str:
    if c.latency is not None:
        a, b = c.latency
        return f"    return {a:.4g} + {b:.4g} * t.latency_ms"
    lines = ["    s = t.s", "    score = torch.zeros_like(t.latency_ms)"]
    for fit in c.per_action:
        value = _tree_expr(fit.tree, 4)
        if fit.unless_error:
            value = f"torch.where(t.error, 0.0, {value})"
        where = [f"(t.action == {fit.action!r})"]
        for path, kind, v in fit.state:
            where.append(f"(s.{path} == {v!r})" if kind == "enum" else (f"s.{path}" if v else f"~s.{path}"))
        if fit.support:
            inside = " | ".join(f"({_path_expr(p)})" for p in fit.support)
            lines.append(f"    # logged only where {inside}: elsewhere the least favourable value")
            lines.append(f"    score = torch.where({' & '.join(where)}, {fit.outside:.4g}, score)")
            where.append(f"({inside})")
        lines.append(f"    score = torch.where({' & '.join(where)}, {value}, score)")
    return "\n".join([*lines, "    return score"])


def render_reward_module(pack: str, reward: RewardGuess, source: str, rows: int) -> str:
    """reward_v1.py of the generated pack."""
    if reward.source == "none":
        intro = (
            "No reward was logged: the components below are placeholders (a cost per step, a bonus for\n"
            "ending a case) so that the pack trains at once. Replace each body marked TODO(expert) with\n"
            "the rules of the process (rules.yaml names the clause each one stands for)."
        )
    else:
        intro = (
            "Every component below is a fitted placeholder: what the component of that name paid in the\n"
            "traces, by action and by a shallow tree over the state (or by the step's latency). It\n"
            "reproduces the logged scores well enough to train and compare policies at once, but it is not\n"
            "the business rule: replace each body marked TODO(expert) with the rule it stands for\n"
            "(rules.yaml names the clause), and delete this paragraph when none is left."
        )
    origin = f"from {rows:,} logged steps ({source})" if rows else "from flags"
    head = f'''"""Reward v1 of {pack}, written by `rlops init` {origin}.

{intro}
"""

import torch

from rlops.sandbox.reward import component, rule_ref

VERSION_LABEL = "v1"
# TODO(expert): how much each objective counts against the others (1.0: as logged).
WEIGHTS = {json.dumps({c.name: 1.0 for c in reward.components})}
CLIP = {number_text(reward.clip)}  # the bound on a step's reward (from traces: 1.5 x the largest logged |reward|)
'''
    if reward.repeat_penalty:
        head += f"REPEAT_PENALTY = {json.dumps(reward.repeat_penalty)}\n"
    parts = [head]
    for c in reward.components:
        fit = "a linear function of the step's latency" if c.latency else "mean score by action and state"
        thin = (
            f"\n    # THIN EVIDENCE: {c.rows} paid scores; splits need {MIN_EVENTS} on each side and means are "
            "shrunk toward the\n    # component's mean: do not trust a policy that exploits this body"
            if c.thin
            else ""
        )
        todo = (
            f"fitted placeholder ({fit}; reproduces {c.r2:.0%} of the variance of the\n    # {c.rows:,} logged scores)"
            f"{thin}"
            if c.rows
            else "placeholder"
        )
        parts.append(
            f"""

@component(objective={c.name!r}, reason={c.reason!r})
@rule_ref({c.rule_ref!r})
def {c.name}(t):
    # TODO(expert): {todo}. Replace with the rule of {c.rule_ref}.
{_body(c)}
"""
        )
    return "".join(parts)


def render_rules(reward: RewardGuess) -> dict[str, dict[str, str]]:
    """rules.yaml's ``rules:`` mapping: one placeholder clause per rule ref."""
    rules: dict[str, dict[str, str]] = {}
    for c in reward.components:
        rules.setdefault(
            c.rule_ref,
            {
                "title": c.reason[:1].upper() + c.reason[1:],
                "text": f"TODO(expert): the written rule component '{c.name}' stands for (inferred from "
                f"{c.rows:,} logged steps that paid it).",
            },
        )
    if reward.repeat_penalty:
        rule = str(reward.repeat_penalty["rule_ref"])
        rules.setdefault(
            rule, {"title": reward.repeat_rule_title, "text": "TODO(expert): the rule against repeating an action."}
        )
    return rules


__all__ = [
    "ComponentGuess",
    "RewardGuess",
    "infer_reward",
    "placeholder_reward",
    "render_reward_module",
    "render_rules",
]
