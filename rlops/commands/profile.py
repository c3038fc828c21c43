"""``rlops profile``: train for a bounded time under ``torch.profiler`` and show where the time goes."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from rlops.commands.common_args import add_common_args, add_reward_fn_arg, context_from_args, print_result

#: The longest profile one command may ask for (a day): a typo must not mean a machine busy for a week.
MAX_DURATION_S = 86_400.0
#: The most iterations one profile records: the profiler's report costs ~70 µs per recorded event.
MAX_SAMPLE_ITERATIONS = 50


def check_trace_path(path: Path) -> None:
    """``--trace`` must name a file rlops can write, checked (by writing a scratch file next to it)
    before any training."""
    import tempfile

    from rlops.common.errors import UserError

    if path.is_dir():
        raise UserError(f"--trace {path}: is a folder; expected a file name for the Chrome trace")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".rlops-write-check-"):
            pass
        if path.exists():
            with path.open("ab"):
                pass
    except OSError as exc:
        raise UserError(
            f"--trace {path}: cannot write there ({exc.strerror or exc}); expected a writable file path"
        ) from None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "profile",
        help="profile PPO training on a pack: time per phase, top operators, Chrome trace",
        description="With --dry-run the arguments are checked but nothing is trained: the timings "
        "come from training, so the dry run's report says 'not computed'.",
    )
    add_common_args(p, run_key=False)
    p.add_argument(
        "--duration",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wall seconds of training (default 60; the iteration running then finishes, and the run lasts "
        "at least until the sample is recorded)",
    )
    p.add_argument(
        "--iterations",
        type=int,
        default=3,
        metavar="N",
        help="consecutive iterations the profiler records, after the first two (default 3; "
        f"at most {MAX_SAMPLE_ITERATIONS}: each one takes seconds to report)",
    )
    p.add_argument("--device", default=None, help="cpu, cuda or auto (default: params)")
    p.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="Chrome trace file to write (default: <local_dir>/profiles/<scenario>/trace-<time>.json)",
    )
    add_reward_fn_arg(p)
    p.set_defaults(func=cmd_profile)


def cmd_profile(args: argparse.Namespace) -> int:
    from rlops.common.errors import UserError
    from rlops.pipeline_steps.training.profile import REGIONS, profile_training, region_lines, timing_line

    if not math.isfinite(args.duration) or not 0 < args.duration <= MAX_DURATION_S:
        raise UserError(f"--duration {args.duration}: expected a number of seconds in (0, {MAX_DURATION_S:g}]")
    if not 1 <= args.iterations <= MAX_SAMPLE_ITERATIONS:
        raise UserError(
            f"--iterations {args.iterations}: expected how many iterations to record, 1 to {MAX_SAMPLE_ITERATIONS}"
        )
    trace = Path(args.trace) if args.trace else None
    if trace is not None:
        check_trace_path(trace)
    ctx = context_from_args(args)
    if args.dry_run:
        res = {
            "dry_run": True,
            "scenario": ctx.scenario,
            "duration_s": args.duration,
            "iterations": args.iterations,
            "regions": list(REGIONS),
            "report": "not computed: a dry run trains nothing, and the timings come from training",
        }
        print_result(
            res,
            args.json,
            [
                f"dry run: would train {args.duration:g}s of PPO on {ctx.scenario} and profile "
                f"{args.iterations} iterations of it (phases {', '.join(REGIONS)})"
            ],
        )
        return 0
    try:
        report = profile_training(ctx, args.duration, args.device, trace, args.reward_fn, args.iterations)
    except KeyError as exc:
        raise UserError(str(exc).strip("'\"")) from None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if not report.trace or not Path(report.trace).is_file() or not Path(report.trace).stat().st_size:
        raise UserError(f"profile --trace {report.trace}: the Chrome trace was not written")
    lines = [
        f"{report.scenario} on {report.device}: {report.iterations} iterations, {report.global_step:,} steps "
        f"in {report.wall_s:.1f}s",
        timing_line(report),
        "where the time goes:",
        *region_lines(report),
        "top 10 operators:",
        report.top_operators,
        f"Chrome trace: {report.trace}",
    ]
    print_result(report.to_dict(), args.json, lines)
    return 0
