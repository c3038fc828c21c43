"""Actions inferred from the steps each was logged on, and the rule engine that reproduces them.

* **precondition** — a conservative starting point: each bool field that had one value on every
  step the action was taken (and the other value elsewhere), each enum field whose values there are
  a strict subset of those seen, and each numeric bound outside which the action was never taken
  although at least :data:`BOUND_SHARE` of the comparable steps (those meeting the bool and enum
  part) lay there;
* **effects** — from each step to the next of the same episode when the call did not fail: a
  constant, a copy of another field, ``min(a, k * b)``, an increment, else a random draw
  (``bernoulli``, a cascade of ``prob`` events for an enum, ``normal`` for a number);
* **terminal** — the episode ended after (nearly) every successful step of the action;
* **api / error rate / latency** — a failing action gets an API of its own with the failure rate seen;
  the latency is the steps' mean and standard deviation;
* **rule_policy** — a classification tree (:mod:`rlops.pack_init.cart`) of the logged action on the
  state, one rule per leaf, kept when it reproduces at least :data:`MIN_POLICY_ACCURACY` of the steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.pack_init.cart import Feature, Split, depth, fit_tree, leaf_index, leaf_paths, leaves, number_text, predict
from rlops.pack_init.fields import FieldGuess
from rlops.trace_store.states import error_flags

if TYPE_CHECKING:
    import pandas as pd

SUPPORT_SHARE = 0.05
SUPPORT_DEPTH = 3
SUPPORT_MIN_ROWS = 20
TERMINAL_SHARE = 0.99
MIN_POLICY_ACCURACY = 0.8
POLICY_DEPTH = 6
SupportPath = tuple[tuple[Split, bool], ...]
HUMAN = re.compile(r"escalat|human|hand_?over|handoff|supervisor|underwriter")


@dataclass(frozen=True)
class ActionGuess:
    """One action as inferred from its logged steps."""

    name: str
    rows: int
    """Steps on which it was taken."""
    precondition: str
    bounds: tuple[str, ...]
    """The numeric parts of ``precondition`` (dropped first when the pack would dead-end)."""
    required_fields: tuple[str, ...]
    effects: tuple[dict[str, Any], ...]
    terminal: bool
    api: str | None
    error_rate: float
    latency_ms: dict[str, float] | None
    human_takeover: bool
    notes: tuple[str, ...] = ()
    """What was guessed and should be checked, for the README."""
    support: tuple[SupportPath, ...] = ()
    """Where it was logged (the leaves of ``bounds``); empty: wherever its precondition holds."""

    def condition(self, with_bounds: bool = True) -> str:
        """The precondition, without the part saying where it was logged unless ``with_bounds``."""
        if with_bounds or not self.bounds:
            return self.precondition
        tail = " and ".join(self.bounds)
        return "true" if self.precondition == tail else self.precondition.removesuffix(" and " + tail)


@dataclass(frozen=True)
class RulePolicyGuess:
    rules: tuple[dict[str, str], ...]
    accuracy: float
    depth: int


def error_column(df: pd.DataFrame) -> np.ndarray:

    return error_flags(df["error"]) if "error" in df.columns else np.zeros(len(df), dtype=bool)


def infer_actions(
    df: pd.DataFrame, fields: list[FieldGuess], extra: tuple[str, ...] = (), strict: bool = False
) -> list[ActionGuess]:
    """An :class:`ActionGuess` per logged action (most taken first keeps the fallback order of the
    rule engine meaningful: the first legal action is the most common one), then ``extra`` names
    that were never logged (always legal until the user says otherwise). Where the log's
    ``action_mask`` says every action was legal on every step, no precondition is read from where
    an action happened to be taken (unless ``strict``): the log says it was allowed everywhere."""
    actions = df["action"].astype(str).to_numpy()
    errors = error_column(df)
    ep = df["episode_id"].to_numpy()
    has_next = np.zeros(len(df), dtype=bool)
    has_next[:-1] = ep[:-1] == ep[1:]
    done = df["done"].fillna(False).astype(bool).to_numpy() if "done" in df.columns else ~has_next
    latency = df["latency_ms"].astype(float).to_numpy() if "latency_ms" in df.columns else None
    names = list(dict.fromkeys(actions))  # first-seen order: the flow as it unfolds
    everywhere = not strict and masks_all_legal(df)
    out = []
    for name in names:
        rows = actions == name
        out.append(_action(name, actions, rows, fields, errors, has_next, done, latency, everywhere))
    for name in extra:
        if name not in names:
            out.append(
                ActionGuess(
                    name,
                    0,
                    "true",
                    (),
                    (),
                    (),
                    False,
                    None,
                    0.0,
                    None,
                    bool(HUMAN.search(name)),
                    ("never logged: always legal, no effects — write both",),
                )
            )
    return out


def masks_all_legal(df: pd.DataFrame) -> bool:
    """The log has an ``action_mask`` column and every logged mask is all ones."""
    if "action_mask" not in df.columns:
        return False
    masks = df["action_mask"].dropna().astype(str)
    return bool(len(masks)) and bool(masks.str.fullmatch("1+").all())


def _action(
    name: str,
    actions: np.ndarray,
    rows: np.ndarray,
    fields: list[FieldGuess],
    errors: np.ndarray,
    has_next: np.ndarray,
    done: np.ndarray,
    latency: np.ndarray | None,
    legal_everywhere: bool = False,
) -> ActionGuess:
    literals = []
    comparable = np.ones(len(rows), dtype=bool)
    for f in [] if legal_everywhere else fields:
        x = f.data[rows]
        if np.isnan(x).any() or f.type not in ("bool", "enum"):
            continue
        seen = np.unique(x)
        everywhere = np.unique(f.data[~np.isnan(f.data)])
        if len(seen) == len(everywhere):
            continue
        if f.type == "bool":
            literals.append(f.path if seen[0] > 0.5 else f"not {f.path}")
        elif len(seen) == 1:
            literals.append(f"{f.path} == '{f.values[int(seen[0])]}'")
        else:
            literals.append(f"{f.path} in [{', '.join(repr(f.values[int(v)]) for v in seen)}]")
        comparable &= np.isin(f.data, seen)
    support = _support(name, actions, fields, comparable)
    bounds = [f"({support[0]})" if " or " in support[0] else support[0]] if support else []
    required = tuple(f.path for f in fields if f.visible_when and not np.isnan(f.data[rows]).any())
    ran = rows & ~errors
    effects, effect_notes = _effects(fields, ran & has_next)
    n_ran = int(ran.sum())
    terminal = n_ran > 0 and float(done[ran].mean()) >= TERMINAL_SHARE
    error_rate = float(errors[rows].mean())
    lat = latency[rows] if latency is not None else None
    latency_ms = None
    if lat is not None and np.isfinite(lat).any():
        ok = lat[np.isfinite(lat)]
        latency_ms = {"mean": round(float(ok.mean()), 1), "std": round(float(ok.std()), 1)}
    notes = list(effect_notes)
    if legal_everywhere:
        notes.append("legal on every logged step (the log's action_mask is all ones): no precondition inferred")
    if HUMAN.search(name):
        notes.append("human_takeover guessed from the name")
    return ActionGuess(
        name,
        int(rows.sum()),
        " and ".join(literals + bounds) or "true",
        tuple(bounds),
        required,
        tuple(effects),
        terminal,
        f"{name}_api" if error_rate > 0 else None,
        round(error_rate, 4),
        latency_ms,
        bool(HUMAN.search(name)),
        tuple(notes),
        support[1] if support else (),
    )


def _support(
    name: str, actions: np.ndarray, fields: list[FieldGuess], comparable: np.ndarray
) -> tuple[str, tuple[SupportPath, ...]] | None:
    """Where, among the comparable steps, the action was taken: the leaves of a one-vs-rest tree
    that hold at least :data:`SUPPORT_SHARE` of their steps for it, as a disjunction (and as the
    leaves' paths). None when the action was taken all over the comparable steps (or too rarely)."""
    rows = np.flatnonzero(comparable)
    y = (actions[rows] == name).astype(np.int64)
    if y.all() or y.sum() < SUPPORT_MIN_ROWS:
        return None
    feats = [Feature(f.path, f.type, f.data[rows], f.values) for f in fields]
    tree = fit_tree(feats, y, classify=True, max_depth=SUPPORT_DEPTH, min_leaf=max(5, len(rows) // 200))
    which = leaf_index(tree, len(y))
    kept: list[str] = []
    paths: list[SupportPath] = []
    all_leaves = leaves(tree)
    for i, (leaf, path) in enumerate(zip(all_leaves, leaf_paths(tree))):
        if int(y[which == i].sum()) >= SUPPORT_SHARE * int((which == i).sum()):
            kept.append(" and ".join(leaf.conditions) or "true")
            paths.append(path)
    if len(kept) == len(all_leaves):
        return None
    text = " or ".join(f"({p})" if len(kept) > 1 and " and " in p else p for p in kept)
    return text, tuple(paths)


def _effects(fields: list[FieldGuess], step: np.ndarray) -> tuple[list[dict[str, Any]], list[str]]:
    """Effects of an action from its successful steps ``step`` (rows with a next row)."""
    idx = np.flatnonzero(step)
    effects: list[dict[str, Any]] = []
    notes: list[str] = []
    numeric = [g for g in fields if g.type in ("int", "float")]
    for f in fields:
        b, n = f.data[idx], f.data[idx + 1]
        valid = ~np.isnan(b) & ~np.isnan(n)
        b, n = b[valid], n[valid]
        if not len(n) or np.array_equal(b, n):
            continue
        after = np.unique(n)
        if len(after) == 1:
            effects.append({"set": {f.path: _literal(f, after[0])}})
            continue
        if f.type == "bool":
            effects.append({"set": {f.path: f"bernoulli({float(n.mean()):.4g})"}})
            notes.append(f"sets {f.path} at random (true on {n.mean():.1%} of the steps): find what decides it")
            continue
        if f.type == "enum":
            shares = np.bincount(n.astype(np.int64), minlength=len(f.values)) / len(n)
            effects.extend(_enum_cascade(f, shares))
            notes.append(f"sets {f.path} at random among {len(after)} values: find what decides it")
            continue
        expr = _numeric_rule(f, b, n, idx[valid], numeric)
        if expr is None:
            changed = float(np.mean(n != b))
            effect: dict[str, Any] = {"set": {f.path: f"normal({float(n.mean()):.6g}, {float(n.std()):.4g})"}}
            if changed < 1.0:
                effect["prob"] = round(changed, 4)
            effects.append(effect)
            notes.append(f"sets {f.path} to a random draw: no formula of the other fields fits")
        else:
            effects.append({"set": {f.path: expr}})
    return effects, notes


def _literal(f: FieldGuess, v: float) -> Any:
    if f.type == "bool":
        return bool(v > 0.5)
    if f.type == "enum":
        return f.values[int(v)]
    return int(v) if f.type == "int" else float(f"{v:.6g}")


def _enum_cascade(f: FieldGuess, shares: np.ndarray) -> list[dict[str, Any]]:
    """Value ``v_i`` with probability ``p_i``: effects in order, each overwriting the ones before,
    the ``i``-th drawn with ``p_i / (p_1 + … + p_i)``."""
    out = []
    total = 0.0
    for code in np.flatnonzero(shares):
        total += float(shares[code])
        prob = float(shares[code]) / total
        effect: dict[str, Any] = {"set": {f.path: f.values[int(code)]}}
        if prob < 1.0:
            effect["prob"] = round(prob, 4)
        out.append(effect)
    return out


def _numeric_rule(
    f: FieldGuess, b: np.ndarray, n: np.ndarray, idx: np.ndarray, numeric: list[FieldGuess]
) -> str | None:
    """An exact formula for the new value: an increment, a copy, ``min(g, k * h)``."""
    tol = 1e-6 * np.maximum(1.0, np.abs(n))
    step = n - b
    if np.all(np.abs(step - step[0]) <= tol):
        return f"{f.path} + {number_text(float(f'{step[0]:.6g}'))}"
    for g in numeric:
        gb = g.data[idx]
        if g.path == f.path or np.isnan(gb).any():
            continue
        if np.all(np.abs(n - gb) <= tol):
            return g.path
        capped = n < gb - tol
        if not capped.any() or np.any(n > gb + tol):
            continue
        for h in numeric:
            hb = h.data[idx][capped]
            if np.isnan(hb).any() or np.any(hb == 0):
                continue
            k = n[capped] / hb
            if np.all(np.abs(k - k[0]) <= 1e-4 * abs(k[0])):
                return f"min({g.path}, {float(f'{k[0]:.6g}')} * {h.path})"
    return None


def process_fields(fields: list[FieldGuess], actions: list[ActionGuess]) -> list[FieldGuess]:
    """The bool and enum fields some action sets to a constant: the state of the process."""
    out = []
    for f in fields:
        sets = [e["set"][f.path] for a in actions for e in a.effects if f.path in e["set"] and "prob" not in e]
        literal = [
            v for v in sets if (f.type == "bool" and isinstance(v, bool)) or (f.type == "enum" and v in f.values)
        ]
        if literal:
            out.append(f)
    return out


def infer_rule_policy(df: pd.DataFrame, fields: list[FieldGuess], actions: list[ActionGuess]) -> RulePolicyGuess:
    """The logged behaviour as a shallow tree, one rule per leaf (see the module docstring)."""
    names = [a.name for a in actions]
    y = df["action"].astype(str).map({n: i for i, n in enumerate(names)}).to_numpy(dtype=np.int64)
    tree = fit_tree(
        [f.feature() for f in fields], y, classify=True, max_depth=POLICY_DEPTH, min_leaf=max(5, len(y) // 1000)
    )
    accuracy = float(np.mean(predict(tree, len(y)) == y))
    rules = tuple(
        {"when": " and ".join(leaf.conditions) or "true", "action": names[int(leaf.value)]} for leaf in leaves(tree)
    )
    return RulePolicyGuess(rules, accuracy, depth(tree))


__all__ = ["ActionGuess", "RulePolicyGuess", "error_column", "infer_actions", "infer_rule_policy"]
