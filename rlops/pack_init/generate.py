"""``rlops init``: infer a pack from traces (or write the smallest one), check it, then put it in place.

The pack is written into a temporary folder next to its destination and loaded there with every
check of :func:`rlops.sandbox.pack.load_pack` (liveness included); only a pack that loads is renamed
into place, so a failed run leaves nothing behind. When the inferred preconditions leave a state
without a legal action, the part saying where each action was logged is dropped first (with
``strict``), then every precondition, and the README says so.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from rlops.common.errors import UserError
from rlops.common.scenario_name import MAX_SCENARIO_NAME, SCENARIO_NAME
from rlops.pack_init.actions import ActionGuess, infer_actions, infer_rule_policy, process_fields
from rlops.pack_init.blank import blank_draft
from rlops.pack_init.fields import IDENTIFIER, FieldGuess, infer_fields
from rlops.pack_init.render import PARAMS_YAML, PackDraft, render_readme, render_rules_yaml, render_scenario
from rlops.pack_init.rewards import infer_reward, placeholder_reward, render_reward_module, render_rules
from rlops.pack_init.traces import read_trace_table
from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import load_pack

IMPORT_MAPPING = "import_mapping.yaml"

MIN_RULE_ACCURACY = 0.8
"""A tree that reproduces fewer of the logged actions is left out (the engine then takes the first legal action)."""


@dataclass(frozen=True)
class InitRequest:
    """What ``rlops init`` was asked for."""

    pack: str
    """The pack's name: its folder under ``scenarios_dir`` and its ``name:``."""
    scenarios_dir: Path
    traces: str | None = None
    """Trace file, folder or URI to infer from; None: the smallest pack from ``actions``/``fields``."""
    actions: tuple[str, ...] = ()
    """Action names (from nothing: the actions; with traces: actions to add that were never logged)."""
    fields: tuple[FieldGuess, ...] = ()
    """State fields of a pack written from nothing."""
    force: bool = False
    """Replace an existing pack folder."""
    strict: bool = False
    """Make where each action was logged part of its precondition (a policy can then only do what was logged)."""


@dataclass(frozen=True)
class InitResult:
    path: str
    pack: str
    source: str
    fields: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    rule_policy_accuracy: float | None
    reward_components: list[dict[str, Any]]
    relaxed: list[str]
    skipped_columns: list[dict[str, str]]
    renamed_columns: dict[str, str]
    """Trace column → field path, for columns whose names are not dotted paths of identifiers (the
    pack's ``import_mapping.yaml`` maps them back for ``rlops import``)."""


def init_pack(req: InitRequest) -> InitResult:
    """Write the pack ``req`` asks for under ``req.scenarios_dir`` (see the module docstring)."""
    if not IDENTIFIER.match(req.pack) or not SCENARIO_NAME.match(req.pack):  # every command takes the name
        raise UserError(
            f"rlops init {req.pack!r}: expected a pack name of letters, digits and _ (first a letter), "
            f"at most {MAX_SCENARIO_NAME} characters"
        )
    target = req.scenarios_dir / req.pack
    if target.exists() and not req.force:
        raise UserError(
            f"rlops init {req.pack}: {target} already exists; choose another name or pass --force to replace it"
        )
    draft = draft_from_traces(req) if req.traces else blank_draft(req.pack, req.actions, req.fields)
    req.scenarios_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{req.pack}.init-", dir=req.scenarios_dir))
    try:
        draft, relaxed = _write_checked(tmp, draft)
        _put_in_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _result(target, draft, relaxed)


def draft_from_traces(req: InitRequest) -> PackDraft:
    assert req.traces is not None
    table = read_trace_table(req.traces)
    df = table.rows
    fields, skipped = infer_fields(df, table.fields)
    if not fields:
        raise UserError(f"--from-traces {req.traces}: no usable state.<field> column ({skipped[0].reason})")
    actions = infer_actions(df, fields, req.actions, strict=req.strict)
    rules = infer_rule_policy(df, fields, [a for a in actions if a.rows])
    reward = infer_reward(df, fields, process_fields(fields, actions), {a.name: a.support for a in actions})
    if not reward.components:
        reward = placeholder_reward(next((a.name for a in actions if a.terminal), None))
    lengths = df.groupby("episode_id").size()
    episodes = int(len(lengths))
    return PackDraft(
        req.pack,
        f"{req.pack}: inferred by rlops init from {episodes:,} logged episodes — describe the process here.",
        int(lengths.max()) + max(2, math.ceil(0.2 * int(lengths.max()))),
        tuple(fields),
        tuple(actions),
        rules if rules.accuracy >= MIN_RULE_ACCURACY else None,
        reward,
        table.source,
        episodes,
        len(df),
        tuple(skipped),
        with_bounds=req.strict,
        mask_width=_mask_width(df),
    )


def _mask_width(df: Any) -> int | None:
    if "action_mask" not in df.columns:
        return None
    widths = df["action_mask"].dropna().astype(str).str.len().unique()
    return int(widths[0]) if len(widths) == 1 else None


def _write(folder: Path, draft: PackDraft, relaxed: list[str]) -> None:
    reward = draft.reward
    (folder / "scenario.yaml").write_text(render_scenario(draft))
    (folder / "rules.yaml").write_text(render_rules_yaml(render_rules(reward)))
    (folder / "reward_v1.py").write_text(
        render_reward_module(draft.name, reward, draft.source or "no traces", draft.rows)
    )
    (folder / "params.yaml").write_text(PARAMS_YAML)
    (folder / "README.md").write_text(render_readme(draft, relaxed))
    text = import_mapping_text(draft)
    if text is not None:
        (folder / IMPORT_MAPPING).write_text(text)


def import_mapping_text(draft: PackDraft) -> str | None:
    """The pack's ``import_mapping.yaml`` for the log it was inferred from: the columns renamed onto
    field paths, and a ``mask_actions`` line to complete where the log's masks have another width
    than the pack's actions; None when the log imports as it is."""
    renamed = renamed_columns(draft)
    other_masks = draft.mask_width is not None and draft.mask_width != len(draft.actions)
    if not renamed and not other_masks:
        return None
    lines = ["# How `rlops import --mapping <this file>` reads the logs this pack was inferred from."]
    if renamed:
        lines.append("# columns: the trace columns whose names are not field paths, renamed by `rlops init`.")
    if other_masks:
        lines += [
            f"# The source's action_mask has {draft.mask_width} positions and the pack {len(draft.actions)} "
            "actions: name the log's",
            "# action at each position, in its system's order, to import its masks:",
            f"# mask_actions: [{', '.join(a.name for a in draft.actions)}, ...]",
        ]
    mapping = {"columns": {path: column for column, path in renamed.items()}} if renamed else {}
    return "\n".join(lines) + "\n" + (yaml.safe_dump(mapping, sort_keys=False) if mapping else "")


def renamed_columns(draft: PackDraft) -> dict[str, str]:
    """Trace column → field path of the fields read from a column renamed onto the grammar."""
    return {f.source_column: f.path for f in draft.fields if f.source_column}


def _write_checked(folder: Path, draft: PackDraft) -> tuple[PackDraft, list[str]]:
    """Write and load the pack; relax the preconditions while a state is left without a legal action."""
    relaxed: list[str] = []
    attempts = [draft, replace(draft, with_bounds=False), _without_preconditions(draft)]
    reasons = ["where each action was logged was dropped from them", "every precondition was dropped"]
    if not draft.with_bounds:
        attempts, reasons = [draft, _without_preconditions(draft)], reasons[1:]
    for i, attempt in enumerate(attempts):
        _write(folder, attempt, relaxed)
        try:
            load_pack(folder)
            return attempt, relaxed
        except PackError as exc:
            if "no legal action" not in exc.message or i == len(attempts) - 1:
                raise UserError(f"rlops init {draft.name}: the written pack does not load: {exc}") from None
            relaxed.append(reasons[i])
    raise AssertionError("unreachable")


def _without_preconditions(draft: PackDraft) -> PackDraft:
    actions = tuple(replace(a, precondition="true", bounds=()) for a in draft.actions)
    return replace(draft, actions=actions, with_bounds=False)


def _put_in_place(tmp: Path, target: Path) -> None:
    if not target.exists():
        os.rename(tmp, target)
        return
    old = target.with_name(f".{target.name}.replaced")
    shutil.rmtree(old, ignore_errors=True)
    os.rename(target, old)
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


def _action_summary(a: ActionGuess, with_bounds: bool) -> dict[str, Any]:
    return {
        "name": a.name,
        "logged_steps": a.rows,
        "precondition": a.condition(with_bounds),
        "effects": list(a.effects),
        "terminal": a.terminal,
        "error_rate": a.error_rate,
    }


def _result(target: Path, d: PackDraft, relaxed: list[str]) -> InitResult:
    return InitResult(
        str(target),
        d.name,
        d.source or "flags",
        [
            {
                "path": f.path,
                "type": f.type,
                "min": f.min,
                "max": f.max,
                "unit": f.unit,
                "values": list(f.values) or None,
                "init": f.init,
                "visible_when": f.visible_when,
            }
            for f in d.fields
        ],
        [_action_summary(a, d.with_bounds) for a in d.actions],
        d.rule_policy.accuracy if d.rule_policy and d.source else None,
        [
            {
                "name": c.name,
                "rule_ref": c.rule_ref,
                "r2": round(c.r2, 4) if c.rows else None,
                "paid": c.rows,
                "thin": c.thin,
            }
            for c in d.reward.components
        ],
        relaxed,
        [{"column": s.column, "reason": s.reason} for s in d.skipped],
        renamed_columns(d),
    )


__all__ = ["InitRequest", "InitResult", "draft_from_traces", "init_pack"]
