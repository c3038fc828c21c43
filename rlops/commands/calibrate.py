"""``rlops calibrate``: fit the sandbox's field distributions and simulation to live traces."""

from __future__ import annotations

import argparse

from rlops.commands.common_args import add_common_args, as_user_error, context_from_args, print_json


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("calibrate", help="fit the sandbox's field distributions and simulation to live traces")
    add_common_args(p)
    p.add_argument("--traces", help="live trace parquet file or folder (default: the scenario's trace store)")
    p.set_defaults(func=cmd_calibrate)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from rlops.pipeline_steps.drift.calibrate import PROFILE, recalibrate

    ctx = context_from_args(args)
    with as_user_error("calibrate"):
        result = recalibrate(ctx, args.traces)
    if args.json:
        print_json(result.as_dict())
        return 0
    segments = f" in {result.segments} population segments" if result.segments > 1 else ""
    print(
        f"calibration {result.version}: {len(result.fields)} fields fitted{segments} "
        f"from {result.rows} rows, "
        f"profile '{PROFILE}' jitter {result.simulation['latency_jitter_ms']}, "
        f"error rates {result.simulation['error_rates']}"
    )
    for path, c in result.check.items():
        print(f"  {path:<36} {c['metric']} {c['before']:.4f} → {c['after']:.4f}")
    print(("would write " if ctx.dry_run else "wrote ") + result.calibration_uri)
    return 0
