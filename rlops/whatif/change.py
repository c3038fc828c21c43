"""A change to a reward module's constants: objective weights (``WEIGHTS``) and the constants the
module declares tunable (``PARAMS``, :mod:`rlops.sandbox.reward_params`).

A changed reward is the base module's source with exactly those literals rewritten (located with
:mod:`ast`, replaced by their character span): it is a reward module like any other, with its own
sha256, and saving it as the pack's next ``reward_vN.py`` writes that very source. The rewrite
keeps every other line, rule references included; a header comment says what it derives from.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, replace
from pathlib import Path

from rlops.common.errors import UserError
from rlops.sandbox.reward import RewardFunction
from rlops.sandbox.reward_loading import load_reward_fn
from rlops.sandbox.reward_params import WEIGHT_RANGE, literal_number


@dataclass(frozen=True)
class RewardChange:
    """New values for objective weights and declared parameters of one reward module."""

    weights: tuple[tuple[str, float], ...] = ()
    """``(objective, weight)`` pairs, in the order given."""
    params: tuple[tuple[str, float], ...] = ()
    """``(constant, value)`` pairs of constants the module declares in ``PARAMS``."""

    def describe(self) -> str:
        """``compliance=0.62, LOW_SCORE_CAP=4`` — the change as a person typed it."""
        return ", ".join(f"{k}={v:g}" for k, v in (*self.weights, *self.params))


def parse_assignment(text: str, flag: str) -> tuple[str, float]:
    """``name=value`` of ``--set``/``--param`` as ``(name, finite float)``; a UserError otherwise."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name or not raw:
        raise UserError(f"{flag} {text!r}: expected NAME=VALUE, e.g. {flag} compliance=0.62")
    try:
        value = float(raw)
    except ValueError:
        raise UserError(f"{flag} {text!r}: {raw!r} is not a number") from None
    if not math.isfinite(value):
        raise UserError(f"{flag} {text!r}: the value must be a finite number, got {raw}")
    return name, value


def resolve_change(fn: RewardFunction, sets: list[str], params: list[str]) -> RewardChange:
    """The change ``--set OBJECTIVE=WEIGHT`` / ``--param NAME=VALUE`` ask of ``fn``, checked against
    its objectives, its weight schedule and signals, and its declared ranges; a UserError (one
    line: what, where, what was expected) on any mistake."""
    if not sets and not params:
        raise UserError("nothing to change: give --set OBJECTIVE=WEIGHT and/or --param NAME=VALUE")
    objectives = sorted({c.objective for c in fn.components})
    scheduled = {k for _, update in fn.schedule for k in update}
    weights: dict[str, float] = {}
    for text in sets:
        name, value = parse_assignment(text, "--set")
        if name not in objectives:
            raise UserError(f"--set {text!r}: reward {fn.label} has no objective {name!r} (objectives: {objectives})")
        if name in scheduled:
            raise UserError(
                f"--set {text!r}: the weight of {name!r} changes by training step (WEIGHT_SCHEDULE of "
                f"reward {fn.label}); a what-if sets constant weights only"
            )
        lo, hi = WEIGHT_RANGE
        if not lo <= value <= hi:
            raise UserError(f"--set {text!r}: an objective weight must lie in [{lo:g}, {hi:g}], got {value:g}")
        if name in weights:
            raise UserError(f"--set {text!r}: objective {name!r} is set twice")
        weights[name] = value
    declared = {p.name.lower(): p for p in fn.params}
    values: dict[str, float] = {}
    for text in params:
        name, value = parse_assignment(text, "--param")
        p = declared.get(name.lower())
        if p is None:
            have = [q.name for q in fn.params]
            raise UserError(
                f"--param {text!r}: reward {fn.label} declares no tunable parameter {name!r} "
                f"(PARAMS: {have or 'none; declare one in the module, see docs/whatif.md'})"
            )
        if not p.low <= value <= p.high:
            raise UserError(
                f"--param {text!r}: {p.name} must lie in its declared range [{p.low:g}, {p.high:g}], got {value:g}"
            )
        if p.name in values:
            raise UserError(f"--param {text!r}: {p.name} is set twice")
        values[p.name] = value
    return RewardChange(tuple(weights.items()), tuple(values.items()))


def _number(value: float) -> str:
    """A literal that reads back as ``value`` (``0.62``, ``3.0``)."""
    return repr(float(value))


def _offsets(source: str) -> list[int]:
    """Character offset of the start of each line (1-based line ``i`` starts at ``[i - 1]``)."""
    out, pos = [], 0
    for line in source.splitlines(keepends=True):
        out.append(pos)
        pos += len(line)
    out.append(pos)
    return out


def _span(source: str, starts: list[int], node: ast.expr) -> tuple[int, int]:
    """Character span of ``node`` (ast columns count UTF-8 bytes)."""

    def at(line: int, col: int) -> int:
        text = source[starts[line - 1] : starts[line]]
        return starts[line - 1] + len(text.encode()[:col].decode(errors="ignore"))

    return at(node.lineno, node.col_offset), at(node.end_lineno or node.lineno, node.end_col_offset or 0)


def rewrite_source(base: RewardFunction, change: RewardChange, label: str, header: str) -> str:
    """``base``'s source with the changed literals, ``VERSION_LABEL = label`` and ``header`` (comment
    lines) on top. The module must assign ``WEIGHTS`` as a dict literal to change a weight."""
    source = base.source
    tree = ast.parse(source)
    starts = _offsets(source)
    edits: list[tuple[int, int, str]] = []
    assigns = {
        n.targets[0].id: n
        for n in tree.body
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
    }
    if change.weights:
        node = assigns.get("WEIGHTS")
        if node is None:
            imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
            at = starts[(imports[-1].end_lineno or 1) if imports else 0]
            text = "WEIGHTS = {" + ", ".join(f"{k!r}: {_number(v)}" for k, v in change.weights) + "}\n"
            edits.append((at, at, text))
        elif not isinstance(node.value, ast.Dict):
            raise UserError(f"{base.path}: WEIGHTS is not written as a dict literal; a what-if cannot rewrite it")
        else:
            keys = {
                k.value: v
                for k, v in zip(node.value.keys, node.value.values)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            }
            missing = []
            for name, value in change.weights:
                if name in keys:
                    edits.append((*_span(source, starts, keys[name]), _number(value)))
                else:
                    missing.append(f"{name!r}: {_number(value)}")
            if missing:
                _, end = _span(source, starts, node.value)
                sep = ", " if node.value.keys else ""
                edits.append((end - 1, end - 1, sep + ", ".join(missing)))
    signal_node = assigns.get("SIGNAL_WEIGHTS")
    pinned = {k for k, _ in change.weights}
    if signal_node is not None and isinstance(signal_node.value, ast.Dict) and pinned:
        edits.extend(_drop_entries(source, starts, signal_node.value, pinned))
    for name, value in change.params:
        node = assigns.get(name)
        if node is None or literal_number(node.value) is None:
            raise UserError(f"{base.path}: the tunable constant {name} is not assigned a number literal")
        edits.append((*_span(source, starts, node.value), _number(value)))
    label_node = assigns.get("VERSION_LABEL")
    if label_node is not None and isinstance(label_node.value, ast.Constant):
        start, end = _span(source, starts, label_node.value)
        quote = '"' if source[start] == '"' else "'"
        edits.append((start, end, f"{quote}{label}{quote}"))
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return header + source


def _drop_entries(source: str, starts: list[int], node: ast.Dict, names: set[str]) -> list[tuple[int, int, str]]:
    """Edits that remove the entries ``names`` from a dict literal (a weight pinned by a what-if no
    longer follows its business signal); all of them gone leaves ``{}``."""
    keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
    drop = [i for i, k in enumerate(keys) if k in names]
    if not drop:
        return []
    if len(drop) == len(keys):
        return [(*_span(source, starts, node), "{}")]
    edits = []
    for i in drop:
        key = node.keys[i]
        assert key is not None
        start = _span(source, starts, key)[0]
        if i + 1 < len(keys):  # up to the next entry's key
            nxt = node.keys[i + 1]
            assert nxt is not None
            edits.append((start, _span(source, starts, nxt)[0], ""))
        else:  # the last entry: from the end of the entry before it
            prev_end = _span(source, starts, node.values[i - 1])[1]
            edits.append((prev_end, _span(source, starts, node.values[i])[1], ""))
    return edits


def derivation_header(base: RewardFunction, change: RewardChange) -> str:
    """The comment lines a derived module starts with: what it derives from, and what changed."""
    in_force = base.weights_at(0)
    old_p = {p.name: p.value for p in base.params}
    signalled = {sw.objective: sw.signal for sw in base.signal_weights}
    name = Path(base.path).name
    lines = [f"# Derived from {name} (reward {base.label}, sha256 {base.version[:12]}) by a reward what-if:"]
    lines += [
        f"#   WEIGHTS[{k!r}] {in_force.get(k, 1.0):g} -> {v:g}"
        + (f" (no longer follows the signal {signalled[k]})" if k in signalled else "")
        for k, v in change.weights
    ]
    lines += [f"#   {k} {old_p[k]:g} -> {v:g}" for k, v in change.params]
    lines.append(f"# Every other line, rule references included, is as in {name}.")
    return "\n".join(lines) + "\n"


def changed_reward_fn(
    base: RewardFunction,
    change: RewardChange,
    label: str,
    folder: Path,
    rules: dict[str, object],
    actions: tuple[str, ...],
    roles: tuple[str, ...] = (),
) -> RewardFunction:
    """The changed module written to ``folder/reward_<label>.py`` and loaded (checked like any reward
    module); it keeps ``base``'s calibration scales and bound signal values."""
    path = folder / f"reward_{label}.py"
    path.write_text(rewrite_source(base, change, label, derivation_header(base, change)), encoding="utf-8")
    fn = load_reward_fn(path, dict(rules), actions, roles=roles)
    return replace(fn, outcome_scales=base.outcome_scales, signal_values=base.signal_values)


__all__ = [
    "RewardChange",
    "changed_reward_fn",
    "derivation_header",
    "parse_assignment",
    "resolve_change",
    "rewrite_source",
]
