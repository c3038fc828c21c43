"""The files of a generated pack as text: scenario.yaml, rules.yaml, params.yaml and README.md
(reward_v1.py is rendered by :mod:`rlops.pack_init.rewards`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from rlops.pack_init.actions import ActionGuess, RulePolicyGuess
from rlops.pack_init.fields import FieldGuess, SkippedColumn
from rlops.pack_init.rewards import RewardGuess


@dataclass(frozen=True)
class PackDraft:
    """Everything inferred for one pack, ready to be written."""

    name: str
    description: str
    horizon: int
    fields: tuple[FieldGuess, ...]
    actions: tuple[ActionGuess, ...]
    rule_policy: RulePolicyGuess | None
    reward: RewardGuess
    source: str
    """The traces it was inferred from ("" when written from flags or prompts)."""
    episodes: int = 0
    rows: int = 0
    skipped: tuple[SkippedColumn, ...] = ()
    with_bounds: bool = False
    """Where each action was logged is part of its precondition (``--strict``); else a comment, and
    the reward is pessimistic outside it."""
    mask_width: int | None = None
    """Positions of the source's ``action_mask`` (None: it has none, or of several widths)."""


def _flow(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a YAML double-quoted scalar
    return yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()


def _field_entry(f: FieldGuess) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": f.type}
    if f.type in ("int", "float"):
        for key, v in (("min", f.min), ("max", f.max)):
            if v is not None:
                entry[key] = int(v) if float(v).is_integer() else v
        if f.unit:
            entry["unit"] = f.unit
    if f.type == "enum":
        entry["values"] = list(f.values)
    entry["init"] = f.init
    if f.visible_when:
        entry["visible_when"] = f.visible_when
    return entry


def render_scenario(d: PackDraft) -> str:
    """scenario.yaml, one line per field and per effect, with how each field was inferred."""
    out = [
        f"# {d.name}: written by `rlops init`" + (f" from {d.source}" if d.source else "") + ".",
        "# A starting point to edit: README.md says what was inferred and what must be checked.",
        f"name: {d.name}",
        f"description: {_flow(d.description)}",
        f"horizon: {d.horizon}",
        "history_len: 4",
        "default_profile: sandbox",
        "",
        "state:",
    ]
    groups: dict[str, list[FieldGuess]] = {}
    for f in d.fields:
        groups.setdefault(f.path.rsplit(".", 1)[0] if "." in f.path else "", []).append(f)
    for group, fields in groups.items():
        depth = 1
        if group:
            for i, part in enumerate(group.split(".")):
                out.append("  " * (i + 1) + f"{part}:")
            depth = len(group.split(".")) + 1
        for f in fields:
            pad = "  " * depth
            if f.evidence:
                out.append(f"{pad}# {f.evidence}")
            out.append(f"{pad}{f.path.rsplit('.', 1)[-1]}: {_flow(_field_entry(f))}")
    out += ["", "actions:"]
    for a in d.actions:
        out.append(f"  # taken on {a.rows:,} logged steps" if a.rows else "  # never logged")
        out.append(f"  - name: {a.name}")
        pre = a.condition(with_bounds=d.with_bounds)
        if a.bounds and not d.with_bounds:
            out.append(f"    # logged only where {' and '.join(a.bounds)}")
        out.append(f"    precondition: {_flow(pre)}")
        if a.required_fields:
            out.append(f"    required_fields: {_flow(list(a.required_fields))}")
        if a.api:
            out.append(f"    api: {a.api}")
        if a.latency_ms:
            out.append(f"    latency_ms: {_flow(a.latency_ms)}")
        if a.human_takeover:
            out.append("    human_takeover: true")
        if a.terminal:
            out.append("    terminal: true")
        if a.effects:
            out.append("    effects:")
            out += [f"      - {_flow(e)}" for e in a.effects]
    if d.rule_policy and d.rule_policy.rules:
        out += [
            "",
            f"# The logged behaviour as a decision tree of depth {d.rule_policy.depth}: it picks the logged "
            f"action on {d.rule_policy.accuracy:.1%} of the steps.",
            "rule_policy:",
        ]
        out += [f"  - {_flow(r)}" for r in d.rule_policy.rules]
    apis = sorted({a.api: a.error_rate for a in d.actions if a.api}.items())
    profiles = {
        "sandbox": {
            "description": "the clean simulator: the logged latencies, no failed calls",
            "latency_jitter_ms": {"min": 0, "max": 0},
            "error_rates": {api: 0.0 for api, _ in apis},
        },
        "live": {
            "description": "production as logged: the failure rate of each call as seen in the traces",
            "latency_jitter_ms": {"min": 0, "max": 0},
            "error_rates": dict(apis),
        },
    }
    out += ["", yaml.safe_dump({"simulation": {"profiles": profiles}}, sort_keys=False, width=120).rstrip()]
    return "\n".join(out) + "\n"


def render_rules_yaml(rules: dict[str, dict[str, str]]) -> str:
    head = "# The rule registry: every reward component cites one clause. TODO(expert): write each clause.\n"
    return head + yaml.safe_dump({"rules": rules}, sort_keys=False, width=100, allow_unicode=True)


PARAMS_YAML = """# Overrides of the root params.yaml for this pack (merged per block by pipeline steps).
evaluate:
  # TODO(expert): segments whose results must not regress, as expressions over the initial state,
  # e.g. young: "applicant.age < 25" (a gate per segment at every promotion).
  segments: {}
"""


def render_readme(d: PackDraft, relaxed: list[str]) -> str:
    """What was inferred, how, and what a person must check before trusting the pack."""
    lines = [f"# {d.name}", ""]
    if d.source:
        lines += [
            f"Written by `rlops init` from `{d.source}`: {d.rows:,} logged steps of {d.episodes:,} episodes. "
            "Everything below is inferred from what the traces show; nothing of it is a business rule yet.",
        ]
    else:
        lines += ["Written by `rlops init` from flags or prompts: the smallest pack that validates and trains."]
    lines += [
        "",
        "Check it: `rlops env validate --scenario " + d.name + "`, `rlops stress --scenario " + d.name + "`;",
        "run the whole loop on it: `rlops demo --scenario " + d.name + "`.",
        "",
        "## State fields",
        "",
        "| field | type | range | unit | init | visible when | how |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in d.fields:
        rng = f"[{_num(f.min)}, {_num(f.max)}]" if f.type in ("int", "float") else (", ".join(f.values) or "")
        init = f.init.get("dist") if isinstance(f.init, dict) else f"constant {f.init}"
        read = f"; read from the column `{f.source_column}` (import_mapping.yaml)" if f.source_column else ""
        lines.append(
            f"| `{f.path}` | {f.type} | {rng} | {f.unit or ''} | {init} | {f.visible_when or ''} | {f.evidence}{read} |"
        )
    for s in d.skipped:
        lines.append(f"| `{s.column}` | left out | | | | | {s.reason} |")
    lines += [
        "",
        "## Actions",
        "",
        "| action | logged steps | precondition | logged only where | effects | terminal | failure rate |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for a in d.actions:
        effects = "; ".join(", ".join(f"{k} ← {v}" for k, v in e["set"].items()) for e in a.effects) or "none seen"
        pre = a.condition(with_bounds=d.with_bounds).replace("|", "\\|")
        where = f"`{' and '.join(a.bounds)}`" if a.bounds and not d.with_bounds else ""
        lines.append(f"| `{a.name}` | {a.rows:,} | `{pre}` | {where} | {effects} | {a.terminal} | {a.error_rate:.2%} |")
        notes += [f"- `{a.name}`: {n}" for n in a.notes]
    if notes:
        lines += ["", "Guessed, to check:", "", *notes]
    if d.rule_policy:
        lines += [
            "",
            "## Rule engine",
            "",
            f"`rule_policy` is a decision tree of depth {d.rule_policy.depth} fitted to the logged actions: "
            f"it picks the logged action on {d.rule_policy.accuracy:.1%} of the steps. It is the champion "
            "every trained policy must beat.",
        ]
    lines += ["", "## Reward", ""]
    if d.reward.source != "none":
        lines += [
            "`reward_v1.py` has one fitted placeholder per component of the logged reward breakdowns "
            "(the share of the variance of its logged scores it reproduces):",
            "",
        ]
        lines += [
            f"- `{c.name}` ({c.rule_ref}): {c.rows:,} steps, {c.r2:.0%}"
            + (" — **thin evidence**: too few paid scores to trust the fit; shrunk toward the mean" if c.thin else "")
            for c in d.reward.components
        ]
    else:
        lines += ["The traces carry no reward: `reward_v1.py` holds a placeholder step cost and completion bonus."]
    checks = [
        "Field ranges are the traces' observed extremes, rounded outwards (every logged row passes): set the "
        "ranges the business defines.",
        "Initial distributions are fitted to the logged episodes; population segments (`simulation.profiles.live."
        "population`) are not inferred.",
        "Preconditions say where each action *was* taken, not where it *may* be taken: widen them where the "
        "business allows more (a trained policy can only choose among legal actions), and add the rules that "
        "forbid an action. Where an action was logged only in part of its states (the `# logged only where` "
        "comments, the logged policy's thresholds), the reward pays its least favourable value outside that "
        "part: write the rule there, or make the comment part of the precondition (`rlops init --strict`).",
        "Effects were read off consecutive steps; a random draw (`bernoulli`, `normal`, `prob`) marks an outcome "
        "whose cause the traces do not show. Hidden ground truth (fraud, default) is not in traces: add it as "
        "`observed: false` fields.",
        "Actions never logged (an escalation the rule engine never chose) are missing: add them.",
        "Every reward component is a fitted placeholder marked `# TODO(expert)`: replace each with the rule it "
        "stands for, write the clause in `rules.yaml`, and add `constraints:` to the clauses `rlops stress` "
        "should check.",
        "`params.yaml`: the segments whose results must not regress, and the pack's operational budget.",
    ]
    if relaxed:
        checks.insert(
            0,
            "The inferred preconditions left a reachable state without a legal action, so " + "; ".join(relaxed) + ".",
        )
    lines += ["", "## What must be checked", ""] + [f"{i}. {c}" for i, c in enumerate(checks, 1)]
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "" if x is None else (str(int(x)) if float(x).is_integer() else f"{x:.4g}")


__all__ = ["PARAMS_YAML", "PackDraft", "render_readme", "render_rules_yaml", "render_scenario"]
