"""A small CART (classification and regression trees) over a pack's state fields.

``rlops init`` fits shallow trees twice: to the logged actions (the ``rule_policy`` that reproduces
the logged behaviour) and to each reward component's logged scores (the fitted placeholder reward).
The trees must read as the DSL's conditions, so a split is one of ``field < t`` (numbers, ``t`` the
shortest decimal between the two sides), ``field == 'value'`` (enums, one value against the rest) or
``field`` (bools). A field that is null on any row of a node (not yet visible to the agent) is not a
candidate there: a split on it is only made below a split that separates its visible rows.
Gini impurity for classes, squared error for numbers; ties break towards the earlier feature.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Feature:
    """One state field as the tree sees it."""

    name: str
    """The field path (``user_profile.credit_score``)."""
    kind: str
    """``int``, ``float``, ``enum`` or ``bool``."""
    data: np.ndarray
    """Values per row as floats: enum codes into ``labels``, bools 0/1; NaN where null."""
    labels: tuple[str, ...] = ()
    """Enum value names, indexed by the codes in ``data``."""


@dataclass(frozen=True)
class Split:
    """``feature`` compared with ``threshold`` (numbers: ``<``) or ``code`` (enums: ``==``; bools: true)."""

    feature: Feature
    threshold: float = math.nan
    code: int = 1

    def left(self, x: np.ndarray) -> np.ndarray:
        """Rows that satisfy the condition."""
        if self.feature.kind in ("int", "float"):
            out: np.ndarray = x < self.threshold
            return out
        same: np.ndarray = x == self.code
        return same

    def condition(self, negate: bool = False) -> str:
        """The condition in the DSL's expression language."""
        f = self.feature
        if f.kind in ("int", "float"):
            return f"{f.name} {'>=' if negate else '<'} {number_text(self.threshold)}"
        if f.kind == "enum":
            return f"{f.name} {'!=' if negate else '=='} '{f.labels[self.code]}'"
        return f"not {f.name}" if negate else f.name


@dataclass(frozen=True)
class Node:
    """A tree node: a leaf when ``split`` is None. ``value`` is the class (an index into the
    classes) of a classification tree, the mean of a regression tree."""

    value: float
    rows: int
    split: Split | None = None
    left: Node | None = None
    right: Node | None = None


@dataclass(frozen=True)
class Leaf:
    """One leaf as a rule: the conditions on its path, its value and how many rows reached it."""

    conditions: tuple[str, ...]
    value: float
    rows: int


def number_text(x: float) -> str:
    """A threshold as it is written into YAML and Python: an integer without ``.0``."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def shortest_between(low: float, high: float) -> float:
    """The number with the fewest decimals in ``(low, high]`` (``low < high``): the threshold a
    person would write between the largest value on one side and the smallest on the other."""
    for digits in range(-6, 13):
        scale = 10.0**digits
        t = math.floor(low * scale + 1.0) / scale
        if low < t <= high:
            return t
    return high


def fit_tree(
    features: Sequence[Feature],
    y: np.ndarray,
    *,
    classify: bool,
    max_depth: int,
    min_leaf: int,
    min_gain: float = 0.0,
) -> Node:
    """Fit a tree to ``y`` (class indices when ``classify``, else numbers) on every row. A split
    must remove at least ``min_gain`` of the whole tree's impurity."""
    y = np.asarray(y)
    floor = min_gain * _impurity(y, classify) if len(y) else 0.0
    return _grow(list(features), y, np.arange(len(y)), classify, max_depth, min_leaf, floor)


def _value(y: np.ndarray, classify: bool) -> float:
    if classify:
        return float(np.bincount(y.astype(np.int64)).argmax())
    return float(y.mean())


def _impurity(y: np.ndarray, classify: bool) -> float:
    """Total impurity of a node (Gini times rows, or the sum of squared errors)."""
    if classify:
        p = np.bincount(y.astype(np.int64)) / len(y)
        return float(len(y) * (1.0 - (p**2).sum()))
    return float(((y - y.mean()) ** 2).sum())


def _grow(
    features: list[Feature],
    y: np.ndarray,
    idx: np.ndarray,
    classify: bool,
    depth: int,
    min_leaf: int,
    min_gain: float,
) -> Node:
    yy = y[idx]
    node = Node(_value(yy, classify), len(idx))
    parent = _impurity(yy, classify)
    if depth == 0 or len(idx) < 2 * min_leaf or parent <= 1e-12:
        return node
    best: tuple[float, Split] | None = None
    for f in features:
        x = f.data[idx]
        if np.isnan(x).any():
            continue
        found = _best_split(f, x, yy, parent, classify, min_leaf)
        if found is not None and found[0] > min_gain and (best is None or found[0] > best[0] + 1e-12):
            best = found
    if best is None:
        return node
    split = best[1]
    mask = split.left(split.feature.data[idx])
    left = _grow(features, y, idx[mask], classify, depth - 1, min_leaf, min_gain)
    right = _grow(features, y, idx[~mask], classify, depth - 1, min_leaf, min_gain)
    if left.split is None and right.split is None and left.value == right.value:
        return node  # a split that changes no prediction only makes the rules longer
    return Node(node.value, len(idx), split, left, right)


def _best_split(
    f: Feature, x: np.ndarray, y: np.ndarray, parent: float, classify: bool, min_leaf: int
) -> tuple[float, Split] | None:
    """The split of ``f`` with the largest impurity decrease, and that decrease."""
    if f.kind in ("int", "float"):
        return _best_threshold(f, x, y, parent, classify, min_leaf)
    best: tuple[float, Split] | None = None
    codes = [1] if f.kind == "bool" else [int(c) for c in np.unique(x)]
    for code in codes:
        split = Split(f, code=code)
        mask = split.left(x)
        n_left = int(mask.sum())
        if n_left < min_leaf or len(x) - n_left < min_leaf:
            continue
        gain = parent - _impurity(y[mask], classify) - _impurity(y[~mask], classify)
        if best is None or gain > best[0] + 1e-12:
            best = (gain, split)
    return best


def _best_threshold(
    f: Feature, x: np.ndarray, y: np.ndarray, parent: float, classify: bool, min_leaf: int
) -> tuple[float, Split] | None:
    """Every cut between two distinct values at once, from cumulative sums over the sorted rows."""
    order = np.argsort(x, kind="stable")
    xs, ys = x[order], y[order]
    n = len(xs)
    cut = np.flatnonzero(xs[:-1] != xs[1:])  # left = rows 0..i
    n_left = cut + 1.0
    ok = (n_left >= min_leaf) & (n - n_left >= min_leaf)
    cut, n_left = cut[ok], n_left[ok]
    if not len(cut):
        return None
    if classify:
        onehot = np.eye(int(ys.max()) + 1)[ys.astype(np.int64)]
        left = np.cumsum(onehot, axis=0)[cut]
        right = onehot.sum(axis=0) - left
        n_right = n - n_left
        impurity = n_left - (left**2).sum(axis=1) / n_left + n_right - (right**2).sum(axis=1) / n_right
    else:
        s1, s2 = np.cumsum(ys)[cut], np.cumsum(ys**2)[cut]
        t1, t2 = float(ys.sum()), float((ys**2).sum())
        n_right = n - n_left
        impurity = (s2 - s1**2 / n_left) + ((t2 - s2) - (t1 - s1) ** 2 / n_right)
    i = int(np.argmin(impurity))
    threshold = shortest_between(float(xs[cut[i]]), float(xs[cut[i] + 1]))
    return parent - float(impurity[i]), Split(f, threshold=threshold)


def leaves(node: Node, path: tuple[Split, ...] = (), sides: tuple[bool, ...] = ()) -> list[Leaf]:
    """Every leaf with the conditions leading to it (the tightest bound per numeric field, each
    other condition once), left (condition true) first."""
    if node.split is None or node.left is None or node.right is None:
        return [Leaf(_conditions(path, sides), node.value, node.rows)]
    return leaves(node.left, (*path, node.split), (*sides, True)) + leaves(
        node.right, (*path, node.split), (*sides, False)
    )


def leaf_paths(node: Node, path: tuple[tuple[Split, bool], ...] = ()) -> list[tuple[tuple[Split, bool], ...]]:
    """Every leaf's path as ``(split, took the left branch)`` pairs, in the order of :func:`leaves`."""
    if node.split is None or node.left is None or node.right is None:
        return [path]
    return leaf_paths(node.left, (*path, (node.split, True))) + leaf_paths(node.right, (*path, (node.split, False)))


def _conditions(path: tuple[Split, ...], sides: tuple[bool, ...]) -> tuple[str, ...]:
    below: dict[str, float] = {}  # field < t
    at_least: dict[str, float] = {}  # field >= t
    out: dict[str, str] = {}
    for split, left in zip(path, sides):
        name = split.feature.name
        if split.feature.kind in ("int", "float"):
            if left:
                below[name] = min(below.get(name, math.inf), split.threshold)
            else:
                at_least[name] = max(at_least.get(name, -math.inf), split.threshold)
            out.setdefault(name, "")
        elif split.feature.kind == "enum" and left:
            # an equality says all there is: drop the inequalities of that field above it
            out = {k: v for k, v in out.items() if not k.startswith(f"{name}=")}
            out[f"{name}=="] = split.condition()
        elif f"{name}==" not in out:
            out[f"{name}={split.code}={left}"] = split.condition(negate=not left)
    text = []
    for key, cond in out.items():
        if cond:
            text.append(cond)
            continue
        if key in at_least:
            text.append(f"{key} >= {number_text(at_least[key])}")
        if key in below:
            text.append(f"{key} < {number_text(below[key])}")
    return tuple(text)


def predict(node: Node, rows: int) -> np.ndarray:
    """The tree's value for each of the ``rows`` rows of the features it was fitted on."""
    out = np.empty(rows, dtype=np.float64)
    stack = [(node, np.arange(rows))]
    while stack:
        n, idx = stack.pop()
        if n.split is None or n.left is None or n.right is None:
            out[idx] = n.value
            continue
        mask = n.split.left(n.split.feature.data[idx])
        stack += [(n.left, idx[mask]), (n.right, idx[~mask])]
    return out


def leaf_index(node: Node, rows: int) -> np.ndarray:
    """For each of the ``rows`` rows, the index of its leaf in the order of :func:`leaves`."""
    out = np.zeros(rows, dtype=np.int64)
    counter = [0]

    def walk(n: Node, idx: np.ndarray) -> None:
        if n.split is None or n.left is None or n.right is None:
            out[idx] = counter[0]
            counter[0] += 1
            return
        mask = n.split.left(n.split.feature.data[idx])
        walk(n.left, idx[mask])
        walk(n.right, idx[~mask])

    walk(node, np.arange(rows))
    return out


def depth(node: Node) -> int:
    if node.left is None or node.right is None:
        return 0
    return 1 + max(depth(node.left), depth(node.right))


__all__ = [
    "Feature",
    "Leaf",
    "Node",
    "Split",
    "depth",
    "fit_tree",
    "leaf_index",
    "leaves",
    "number_text",
    "predict",
    "shortest_between",
]
