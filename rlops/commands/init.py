"""``rlops init PACK``: start a scenario pack from traces, or the smallest one from flags or prompts."""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "init",
        help="start a scenario pack: inferred from traces, or the smallest valid one from flags or prompts",
        description="Write scenarios/PACK/ (scenario.yaml, rules.yaml, reward_v1.py, params.yaml, README.md): "
        "inferred from traces with --from-traces, else from --actions and --fields (prompted for on a terminal). "
        "The pack is checked before it is put in place; a failed run writes nothing.",
    )
    p.add_argument("pack", metavar="PACK", help="the pack's name (its folder and its name:)")
    p.add_argument(
        "--from-traces",
        metavar="FILE_OR_URI",
        default=None,
        help="trace parquet file or folder, or JSON-lines file, by path or URI (file://, s3://)",
    )
    p.add_argument(
        "--actions",
        default=None,
        metavar="A,B,C",
        help="the actions (from nothing; the last one ends a case), or actions never logged to add to the traces'",
    )
    p.add_argument(
        "--fields",
        default=None,
        metavar="SPEC,...",
        help="state fields from nothing: name:type[:min:max] (int, float, bool) or name:enum:a|b|c, comma-separated",
    )
    p.add_argument(
        "--dir", default=None, help="the scenarios folder (default: params 'scenarios_dir', else scenarios/)"
    )
    p.add_argument("--force", action="store_true", help="replace an existing pack folder of that name")
    p.add_argument(
        "--strict",
        action="store_true",
        help="preconditions also say where each action was logged (a policy can then only do what was logged), even "
        "where the log's action masks say every action was legal",
    )
    p.add_argument("--json", action="store_true", help="print what was inferred as JSON on stdout")
    p.set_defaults(func=cmd_init)


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(x.strip() for x in (text or "").split(",") if x.strip())


def cmd_init(args: argparse.Namespace) -> int:
    from dataclasses import asdict
    from pathlib import Path

    from rlops.commands.common_args import print_json
    from rlops.common.config import load_params, scenarios_dir
    from rlops.common.errors import UserError
    from rlops.pack_init.blank import parse_field
    from rlops.pack_init.generate import InitRequest, init_pack

    actions, fields = _split(args.actions), _split(args.fields)
    if args.from_traces and fields:
        raise UserError("rlops init: --fields is for a pack from nothing; with --from-traces the fields are inferred")
    if not args.from_traces and not actions and sys.stdin.isatty() and not args.json:
        actions = _split(input("actions, in the order of the process (comma-separated; the last ends a case): "))
        fields = _split(input("state fields, name:type[:min:max] or name:enum:a|b|c (comma-separated, may be empty): "))
    folder = Path(args.dir) if args.dir else scenarios_dir(load_params())
    result = init_pack(
        InitRequest(
            args.pack,
            folder,
            args.from_traces,
            actions,
            tuple(parse_field(f) for f in fields),
            force=args.force,
            strict=args.strict,
        )
    )
    if args.json:
        print_json(asdict(result))
        return 0
    print(f"wrote {result.path}: {len(result.fields)} fields, {len(result.actions)} actions from {result.source}")
    if result.rule_policy_accuracy is not None:
        print(f"  rule_policy: reproduces {result.rule_policy_accuracy:.1%} of the logged actions")
    for c in result.reward_components:
        fitted = f"fitted placeholder, R² {c['r2']:.2f}" if c["r2"] is not None else "placeholder"
        if c["thin"]:
            fitted += f" — ! thin evidence: {c['paid']} paid scores (shrunk toward the mean; write the rule)"
        print(f"  reward component {c['name']} ({c['rule_ref']}): {fitted}")
    for r in result.relaxed:
        print(f"  ! preconditions relaxed: {r}")
    if result.renamed_columns:
        first, path = next(iter(result.renamed_columns.items()))
        print(
            f"  renamed {len(result.renamed_columns)} column(s) whose names are not field paths "
            f"(e.g. {first} → {path}); import_mapping.yaml maps them for `rlops import`"
        )
    by_reason: dict[str, list[str]] = {}
    for s in result.skipped_columns:
        by_reason.setdefault(s["reason"], []).append(s["column"])
    for reason, columns in by_reason.items():
        more = f" and {len(columns) - 3} more" if len(columns) > 3 else ""
        print(f"  ! left out {', '.join(columns[:3])}{more}: {reason}")
    print(f"next: read {result.path}/README.md, then `rlops env validate --scenario {result.path}`")
    return 0
