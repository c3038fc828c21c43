"""``rlops replay`` and ``rlops audit``: why does the agent do what it does?"""

from __future__ import annotations

import argparse
import sys

from rlops.commands.common_args import add_common_args, as_user_error, context_from_args, print_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("replay", help="the decision path of one trace: states, masks, probabilities, rewards")
    add_common_args(p)
    p.add_argument("--trace-id", required=True)
    p.add_argument("--depth", type=int, help="show at most this many steps, ending at the trace's step")
    p.add_argument("--traces", help="trace parquet file or folder (default: the scenario's trace store)")
    p.set_defaults(func=cmd_replay)
    a = sub.add_parser("audit", help="per state cluster: top actions, their rewards, what drives low scores")
    add_common_args(a)
    a.add_argument("--policy-version", help="only the steps this policy version took")
    a.add_argument("--traces", help="trace parquet file or folder (default: the run key's window)")
    a.set_defaults(func=cmd_audit)


def cmd_replay(args: argparse.Namespace) -> int:

    from rlops.pipeline_steps.audit.replay import render_path, replay

    ctx = context_from_args(args)
    with as_user_error("replay"):
        path = replay(ctx, args.trace_id, args.depth, args.traces)
    if args.json:
        print_json(path.as_dict())
    else:
        print(render_path(path))
    for reason in path.rows_skipped:
        print(f"warning: row skipped: {reason}", file=sys.stderr)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:

    from rlops.pipeline_steps.audit.report import audit

    ctx = context_from_args(args)
    with as_user_error("audit"):
        result = audit(ctx, args.policy_version, args.traces)
    if args.json:
        print_json(result.as_dict())
    else:
        print(
            f"audit of {result.rows} steps in {result.clusters} clusters: "
            + ("would write " if ctx.dry_run else "wrote ")
            + result.html_uri
        )
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0
