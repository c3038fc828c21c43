"""Benchmark: rlops drift detection vs a loop of ``scipy.stats.ks_2samp`` over the same fields.

32 numeric fields × 1 000 000 rows on each side, seeded normal data; 24 fields unchanged and
8 shifted by 0.002σ … 1σ, which puts some p-values in every branch of scipy's KS distribution
code (the slow one-sided Smirnov series included). Both sides get the same pandas DataFrames;
the scipy side is a plain loop, as a user would write it. Statistics must be identical and
p-values equal to float precision; the table shows each field, then the LAST line is one JSON
object with the timings.

    python bench/drift.py [--rows 1000000] [--fields 32] [--repeats 1] [--workers N] [--clock wall|cpu]

``--clock cpu`` times both sides in CPU seconds of this process (all threads together): on a
machine shared with other work that is the steady measure; it compares the work each side does,
so with ``--workers 1`` the ratio is the single-core one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.pipeline_steps.drift.stats import detect_drift  # noqa: E402

SHIFTS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3, 1.0)


def make_frames(rows: int, n_fields: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, list[float]]:
    rng = np.random.default_rng(seed)
    shifts = [0.0] * (n_fields - len(SHIFTS)) + list(SHIFTS)[-n_fields:]
    names = [f"state.f{i:02d}" for i in range(n_fields)]
    base = pd.DataFrame({n: rng.standard_normal(rows) for n in names})
    targ = pd.DataFrame({n: rng.standard_normal(rows) + s for n, s in zip(names, shifts, strict=True)})
    return base, targ, shifts


def ulps(a: float, b: float) -> float:
    if a == b:
        return 0.0
    return abs(a - b) / float(np.spacing(max(abs(a), abs(b))))


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--fields", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=1, help="best of N timings for each side")
    ap.add_argument("--workers", type=int, default=None, help="rlops threads (default: CPUs)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--clock",
        default="wall",
        choices=("wall", "cpu"),
        help="wall seconds, or CPU seconds of this process (steady on a busy machine)",
    )
    args = ap.parse_args(argv)
    clock = time.perf_counter if args.clock == "wall" else time.process_time

    base, targ, shifts = make_frames(args.rows, args.fields, args.seed)
    names = list(base.columns)
    # warm both code paths (imports, allocator) on a slice so neither side pays first-call costs
    detect_drift(base.iloc[:20_000], targ.iloc[:20_000], fields=names[:2], workers=args.workers)
    scipy.stats.ks_2samp(base[names[0]].to_numpy()[:20_000], targ[names[0]].to_numpy()[:20_000])

    rlops_s, scipy_s = float("inf"), float("inf")
    for _ in range(args.repeats):
        t0 = clock()
        report = detect_drift(base, targ, fields=names, workers=args.workers)
        rlops_s = min(rlops_s, clock() - t0)
        t0 = clock()
        ref = [scipy.stats.ks_2samp(base[n].to_numpy(), targ[n].to_numpy()) for n in names]
        scipy_s = min(scipy_s, clock() - t0)

    print(f"{'field':<12}{'shift':>7}{'D':>12}{'p rlops':>14}{'p scipy':>14}{'ulps':>6}  same D")
    max_abs, max_ulps, same_d = 0.0, 0.0, True
    for f, r, s in zip(report.fields, ref, shifts, strict=True):
        p_ref, d_ref = float(r.pvalue), float(r.statistic)
        max_abs = max(max_abs, abs(f.p_value - p_ref))
        max_ulps = max(max_ulps, ulps(f.p_value, p_ref))
        same_d &= f.statistic == d_ref
        print(
            f"{f.field:<12}{s:>7g}{f.statistic:>12.6f}{f.p_value:>14.6g}{p_ref:>14.6g}"
            f"{ulps(f.p_value, p_ref):>6.0f}  {f.statistic == d_ref}"
        )
    print(
        f"rows/side={args.rows} fields={args.fields} threads={args.workers or os.cpu_count()} "
        f"rlops={rlops_s:.3f}s scipy={scipy_s:.3f}s ({args.clock} clock) ratio={scipy_s / rlops_s:.1f}x"
    )
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "rlops_s": round(rlops_s, 4),
                "scipy_s": round(scipy_s, 4),
                "ratio": round(scipy_s / rlops_s, 2),
                "max_abs_p_diff": max_abs,
                "max_p_ulps": max_ulps,
                "identical_statistics": same_d,
                "rows": args.rows,
                "fields": args.fields,
                "threads": args.workers or os.cpu_count(),
                "clock": args.clock,
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )
    return 0 if same_d else 1


if __name__ == "__main__":
    raise SystemExit(main())
