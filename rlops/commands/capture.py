"""``rlops capture``: one interval of traces (landing zone or simulated champion traffic) into the
validated trace store."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from rlops.commands.common_args import add_common_args, as_user_error, context_from_args, print_result
from rlops.common import step_request
from rlops.pipeline_steps.capture.request import CaptureRequest

if TYPE_CHECKING:
    from rlops.pipeline_steps.capture.summary import CaptureSummary


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "capture",
        help="landing zone (or simulated champion traffic) → validated trace store",
        description="With --dry-run every row is read, validated and counted as in a real run, but no "
        "partition is written: the fallback share (and its alert) is counted on the partitions "
        "written, so the dry run's fallbacks says 'not computed'. More rows quarantined than "
        "capture.max_quarantine_share exits 2 with the top reasons (the rows are written, accepted and "
        "quarantined alike); an interval without rows says where the newest landing files are (exit 0).",
    )
    add_common_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--simulate",
        dest="simulate",
        action="store_true",
        default=None,
        help="run the champion in a simulation profile instead of reading the landing zone",
    )
    src.add_argument(
        "--landing-zone",
        dest="simulate",
        action="store_false",
        help="read the landing zone only (default: the landing zone when it has files)",
    )
    src.add_argument(
        "--from-mlflow",
        action="store_true",
        help="read the interval's agent decisions from MLflow's trace store (capture.mlflow_experiment)",
    )
    src.add_argument(
        "--otlp-file", default=None, metavar="URI", help="read agent decisions from an OTLP/JSON span export file"
    )
    step_request.add_arguments(p, CaptureRequest)
    p.set_defaults(func=cmd_capture)


def cmd_capture(args: argparse.Namespace) -> int:
    from rlops.common.progress import show_progress
    from rlops.pipeline_steps.capture.step import capture_step, capture_traces

    ctx = context_from_args(args)

    def run() -> CaptureSummary:
        if args.from_mlflow or args.otlp_file:
            return capture_traces(ctx, otlp_uri=args.otlp_file)
        request = dataclasses.replace(step_request.from_args(CaptureRequest, args), simulate=args.simulate)
        return capture_step(ctx, request, progress=show_progress(args.json))

    return report_capture("capture", run, args.json, ctx.dry_run, "partition file(s)")


def report_capture(command: str, run: Callable[[], CaptureSummary], as_json: bool, dry_run: bool, unit: str) -> int:
    """Run a capture (or an import) and print what it did: the counts and where the rows went, then
    its warnings and alerts on stderr; a rejected run prints the same, then its one-paragraph error
    (exit 2: bad input, the rows kept)."""
    from rlops.pipeline_steps.capture.input_checks import CaptureRejected

    rejected: CaptureRejected | None = None
    with as_user_error(command):
        try:
            res = run()
        except CaptureRejected as exc:
            if exc.summary is None:
                raise
            res, rejected = exc.summary, exc
    verb = "would write" if dry_run else "wrote"
    print_result(
        res.as_dict(),
        as_json,
        [
            f"{res.source}: {res.rows_in} rows in, {res.rows_accepted} accepted, "
            f"{res.rows_quarantined} quarantined; {verb} {len(res.partitions)} {unit}"
        ],
    )
    for warning in res.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for alert in res.alerts:
        print(f"ALERT: {alert}", file=sys.stderr)
    if rejected is not None:
        raise rejected  # one paragraph on stderr, exit 2 (bad input)
    return 0
