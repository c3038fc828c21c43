"""``rlops import``: a decision log from before rlops (parquet, CSV or JSON lines, with its own
timestamps) into the validated trace store, partitioned by event time."""

from __future__ import annotations

import argparse
import sys

from rlops.commands.common_args import add_common_args, as_user_error, context_from_args, print_result
from rlops.common import step_request
from rlops.pipeline_steps.capture.request import ImportRequest


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "import",
        help="a decision log from before rlops (parquet, CSV, JSON lines) → validated trace store",
        description="Map the log's columns onto the trace schema (docs/trace-store.md) with --columns or a "
        "--mapping file; every row is validated as a capture's: rows in = accepted + quarantined, each "
        "partitioned by its own timestamp. --dry-run reads, validates and counts without writing. More rows "
        "quarantined than capture.max_quarantine_share, or none accepted, exits 2 (what was accepted is kept).",
    )
    add_common_args(p)
    step_request.add_arguments(p, ImportRequest)
    p.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.capture.history import import_log
    from rlops.pipeline_steps.capture.input_checks import CaptureRejected

    ctx = context_from_args(args)
    rejected: CaptureRejected | None = None
    with as_user_error("import"):
        try:
            res = import_log(ctx, step_request.from_args(ImportRequest, args))
        except CaptureRejected as exc:
            if exc.summary is None:
                raise
            res, rejected = exc.summary, exc
    verb = "would write" if ctx.dry_run else "wrote"
    print_result(
        res.as_dict(),
        args.json,
        [
            f"{res.source}: {res.rows_in} rows in, {res.rows_accepted} accepted, {res.rows_quarantined} "
            f"quarantined; {verb} {len(res.partitions)} hour partition(s) of [{res.interval[0]}, {res.interval[1]})"
        ],
    )
    for warning in res.warnings:
        print(f"note: {warning}", file=sys.stderr)
    if rejected is not None:
        raise rejected
    return 0
