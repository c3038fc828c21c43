"""``rlops import``: a decision log from before rlops (parquet, CSV or JSON lines, with its own
timestamps) into the validated trace store, partitioned by event time."""

from __future__ import annotations

import argparse

from rlops.commands.capture import report_capture
from rlops.commands.common_args import add_common_args, context_from_args
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

    ctx = context_from_args(args)
    request = step_request.from_args(ImportRequest, args)
    return report_capture("import", lambda: import_log(ctx, request), args.json, ctx.dry_run, "hour partition(s)")
