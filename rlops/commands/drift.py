"""``rlops drift detect | check``: compare two trace windows, or live traffic with the sandbox.

``--baseline`` and ``--target`` each name one parquet file or one folder of them, read literally:
no glob, so the same text names the same rows on both sides.

Exit codes: 0 done, 2 bad input, 3 drift found (or a retrain called for) with ``--fail-on-drift``.
"""

from __future__ import annotations

import argparse

from rlops.commands.common_args import add_common_args, as_user_error, context_from_args, print_json, print_result
from rlops.common import step_request
from rlops.pipeline_steps.drift.request import DriftCheckRequest

EXIT_DRIFT = 3


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drift = sub.add_parser("drift", help="field-by-field drift between trace windows; the drift monitor's check")
    verbs = drift.add_subparsers(dest="drift_command", required=True, metavar="ACTION")

    p = verbs.add_parser("detect", help="compare two trace windows field by field (KS / chi-square)")
    add_common_args(p, run_key=False)
    literal = "read literally on both sides: '*', '?' and '[' are part of a name, never a pattern"
    p.add_argument("--baseline", required=True, help=f"parquet file or folder (file://, s3://), {literal}")
    p.add_argument("--target", required=True, help="parquet file or folder to compare, read as --baseline is")
    p.add_argument("--threshold", type=float, help="p-value cut-off (params: drift.threshold)")
    p.add_argument("--min-effect", type=float, help="effect-size floor (drift.min_effect)")
    p.add_argument("--bh", action="store_true", default=None, help="Benjamini–Hochberg adjustment across fields")
    p.add_argument(
        "--fields", help="comma-separated fields (default: state.*, latency_ms, error, action, reward_total)"
    )
    p.add_argument("--out", help="output folder URI for report.json and report.html")
    p.add_argument("--fail-on-drift", action="store_true", help="exit 3 if any field drifted")
    p.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    p.set_defaults(func=cmd_detect)

    p = verbs.add_parser(
        "check",
        help="live traces of the run key's hour vs the calibrated sandbox "
        "(+ champion anomaly); the drift monitor's step",
    )
    add_common_args(p)
    step_request.add_arguments(p, DriftCheckRequest)
    p.add_argument("--fail-on-drift", action="store_true", help="exit 3 when a retrain is called for")
    p.set_defaults(func=cmd_check)


def cmd_detect(args: argparse.Namespace) -> int:

    from rlops.pipeline_steps.drift.report import run_drift

    ctx = context_from_args(args)
    fields = [f.strip() for f in args.fields.split(",") if f.strip()] if args.fields else None
    with as_user_error("drift detect"):  # a missing window is bad input; other storage errors exit 1
        result = run_drift(
            ctx.params,
            args.baseline,
            args.target,
            args.out,
            fields=fields,
            threshold=args.threshold,
            min_effect=args.min_effect,
            bh=args.bh,
            dry_run=args.dry_run,
            track=not args.no_track,
            scenario=ctx.scenario,
            decisions=True,
        )
    report = result.report
    assert report is not None  # run_drift always attaches it
    if args.json:
        print_json({**report.to_dict(), "result": result.to_dict()})
    else:
        for f in report.fields:
            print(
                f"{f.field:<28} {f.test:<5} error: {f.error}"
                if f.test == "error"
                else f"{f.field:<28} {f.test:<5} effect={f.effect:.4f} p={f.p_value:.3g}"
                f"{'  DRIFTED' if f.drifted else ''}"
            )
        print(report.summary)
        print(("would write " if result.dry_run else "wrote ") + result.html_uri)
    return EXIT_DRIFT if args.fail_on_drift and report.drifted_fields else 0


def cmd_check(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.drift.check import drift_check

    ctx = context_from_args(args)
    res = drift_check(ctx, step_request.from_args(DriftCheckRequest, args))
    print_result(
        res.as_dict(),
        args.json,
        [
            f"{res.summary} drifted: {res.drifted_fields or 'none'}; anomaly: {res.anomaly}; retrain: {res.retrain}"
            + (f"\nreport: {res.html_uri}" if res.html_uri else "")
        ],
    )
    return EXIT_DRIFT if args.fail_on_drift and res.retrain else 0
