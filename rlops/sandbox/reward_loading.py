"""Loading a reward module: import it by path and check its components, their rule references and
its module-level settings (``WEIGHTS``, ``WEIGHT_SCHEDULE``, ``CLIP``, ``REPEAT_PENALTY``, and the
signal weights and tunable constants of :mod:`rlops.sandbox.reward_signals` and
:mod:`rlops.sandbox.reward_params`) into a :class:`~rlops.sandbox.reward.RewardFunction`."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import re
import sys
from pathlib import Path
from typing import Any

from rlops.sandbox.errors import PackError
from rlops.sandbox.pack_files import read_pack_text
from rlops.sandbox.reward import Component, RewardFunction
from rlops.sandbox.reward_params import parse_params
from rlops.sandbox.reward_signals import parse_signal_weights


def load_reward_fn(
    path: Path, rules: dict[str, Any], actions: tuple[str, ...], root: Path | None = None, roles: tuple[str, ...] = ()
) -> RewardFunction:
    """Import a reward module by path and check its components against ``rules`` and ``actions``.
    With ``root`` (the pack folder) the file must resolve inside it: a module linked in from
    elsewhere is refused before it runs. Importing runs the module's code in this process;
    :mod:`rlops.sandbox.isolate` does it first in a child process with time and memory limits."""
    source = read_pack_text(path, root)
    mod_name = f"rlops_reward_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}_{path.stem}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise PackError(str(path), exc.lineno, "", f"syntax error in reward module: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any import failure is an authoring error
        tb = exc.__traceback__
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == str(path):
                line = tb.tb_lineno
            tb = tb.tb_next
        raise PackError(str(path), line, "", f"reward module failed to import: {type(exc).__name__}: {exc}") from None
    components = []
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        meta = getattr(fn, "__component__", None)
        if meta is None or fn.__module__ != mod_name:
            continue
        line = inspect.getsourcelines(fn)[1]
        ref = getattr(fn, "__rule_ref__", None)
        if ref is None:
            raise PackError(
                str(path),
                line,
                name,
                "reward component has no @rule_ref(...) (every component must cite a rule of rules.yaml)",
            )
        if ref not in rules:
            raise PackError(
                str(path), line, name, f"dangling rule ref '{ref}': not defined in rules.yaml (known: {sorted(rules)})"
            )
        if meta["settle_on"] is not None and meta["settle_on"] not in actions:
            raise PackError(
                str(path),
                line,
                name,
                f"settle_on names undefined action '{meta['settle_on']}' (actions: {list(actions)})",
            )
        role = meta.get("role")
        if role is not None and role not in roles:
            raise PackError(
                str(path),
                line,
                name,
                f"reward component names role {role!r}, but "
                + (f"the scenario's roles are {list(roles)}" if roles else "the scenario declares no roles: block"),
            )
        components.append(Component(name, fn, meta["objective"], ref, meta["reason"], meta["settle_on"], line, role))
    if not components:
        raise PackError(str(path), None, "", "reward module defines no @component functions")
    components.sort(key=lambda c: c.line)
    objectives = {c.objective for c in components}
    weights, schedule, clip, rp = _settings(path, module, source, objectives, rules)
    written = getattr(module, "WEIGHTS", None) or {}
    scheduled = {k for _, update in schedule for k in update}
    signal_weights = parse_signal_weights(path, module, source, objectives, written, scheduled)
    params = parse_params(path, module, source, rules)
    sys.modules.pop(mod_name, None)
    return RewardFunction(
        str(path),
        str(getattr(module, "VERSION_LABEL", path.stem)),
        hashlib.sha256(source.encode()).hexdigest(),
        source,
        tuple(components),
        weights,
        schedule,
        clip,
        rp,
        signal_weights=signal_weights,
        params=params,
    )


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    """A number that is not NaN or infinite: a weight, clip or penalty of ``float('inf')`` would
    turn every reward into ±inf or NaN."""
    try:
        return _is_num(v) and math.isfinite(float(v))
    except OverflowError:
        return False


def _settings(
    path: Path, module: Any, source: str, objectives: set[str], rules: dict[str, Any]
) -> tuple[dict[str, float], tuple[tuple[int, dict[str, float]], ...], float | None, dict[str, Any] | None]:
    """Check the module-level WEIGHTS, WEIGHT_SCHEDULE, CLIP and REPEAT_PENALTY; a bad value is a
    PackError at the line that assigns it (a typo in an objective name would silently weigh 1)."""

    def bad(name: str, msg: str) -> PackError:
        m = re.search(rf"^{name}\s*[:=]", source, re.M)
        return PackError(str(path), None if m is None else source.count("\n", 0, m.start()) + 1, name, msg)

    def weight_map(name: str, w: Any) -> dict[str, float]:
        if not isinstance(w, dict) or not all(isinstance(k, str) and _finite(v) for k, v in w.items()):
            raise bad(name, f"expected a mapping objective → number, got {w!r}")
        unknown = set(w) - objectives
        if unknown:
            raise bad(name, f"unknown objective(s) {sorted(unknown)} (objectives: {sorted(objectives)})")
        return {k: float(v) for k, v in w.items()}

    weights = weight_map("WEIGHTS", getattr(module, "WEIGHTS", None) or {})
    for obj in objectives:
        weights.setdefault(obj, 1.0)
    raw = getattr(module, "WEIGHT_SCHEDULE", None) or []
    if not isinstance(raw, (list, tuple)) or not all(
        isinstance(s, (list, tuple))
        and len(s) == 2
        and isinstance(s[0], int)
        and not isinstance(s[0], bool)
        and s[0] >= 0
        for s in raw
    ):
        raise bad("WEIGHT_SCHEDULE", "expected a list of (env step, {objective: weight}) pairs")
    schedule = tuple(sorted((int(s), weight_map("WEIGHT_SCHEDULE", w)) for s, w in raw))
    clip = getattr(module, "CLIP", None)
    if clip is not None and not (_finite(clip) and clip > 0):
        raise bad("CLIP", f"expected a positive number (the bound on |total|), got {clip!r}")
    rp = getattr(module, "REPEAT_PENALTY", None)
    if rp is not None:
        if not (
            isinstance(rp, dict)
            and set(rp) <= {"penalty", "after", "rule_ref"}
            and _finite(rp.get("penalty"))
            and rp["penalty"] >= 0
            and isinstance(rp.get("after", 1), int)
            and rp.get("after", 1) >= 1
        ):
            raise bad(
                "REPEAT_PENALTY",
                f"expected {{'penalty': number >= 0, 'after': int >= 1, 'rule_ref': rule id}}, got {rp!r}",
            )
        if rp.get("rule_ref") is not None and rp["rule_ref"] not in rules:
            raise bad("REPEAT_PENALTY", f"dangling rule ref '{rp['rule_ref']}': not defined in rules.yaml")
    return weights, schedule, None if clip is None else float(clip), rp


__all__ = ["load_reward_fn"]
