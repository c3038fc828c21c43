"""Benchmark: trace-contract validation in chunks vs one Great Expectations run per row.

Both sides run the same GE suites on the same rows (a credit-approval-like contract: 12
state fields, 1% bad rows). rlops validates a whole chunk per GE run and splits rows by the
unexpected-index lists; the naive side validates each row as its own batch (timed on a
sample, it is far too slow for all rows). Then the whole capture step runs end to end on a
local landing zone (parse + validate + parquet partitions + quarantine) with its peak RSS.
The LAST line is one JSON object with the figures.

    python bench/capture.py [--rows 200000] [--chunk-rows 100000] [--per-row-sample 40]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.data_contracts import parse_json_lines, trace_contract, validate_frame  # noqa: E402
from rlops.pipeline_steps.capture.core import capture_landing_zone  # noqa: E402
from rlops.storage.backend import Storage  # noqa: E402

ACTIONS = ["screen", "fraud_check", "credit_report", "approve", "reject", "notify"]
FIELDS = [(f"user_profile.f{i}", "float", 0, 100, None) for i in range(9)] + [
    ("user_profile.credit_score", "int", 300, 850, None),
    ("application.channel", "enum", None, None, ["web", "branch", "app"]),
    ("flags.vip", "bool", None, None, None),
]
START = datetime(2026, 1, 5, 10, tzinfo=UTC)


def make_lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        rec = {
            "trace_id": f"req-{i // 5}",
            "episode_id": f"ep-{i // 5}",
            "step": i % 5,
            "ts": (START + timedelta(seconds=i * 3600 / n)).isoformat(),
            "scenario": "credit_approval",
            "source": "live",
            "test_group": "A",
            "policy_version": "champion-7",
            "reward_fn_version": "v1",
            "action": ACTIONS[i % 6],
            "action_mask": "111111",
            "logp": -rng.random(),
            "entropy": rng.random(),
            "value": rng.random(),
            "reward_total": rng.random(),
            "reward_breakdown": '[{"component":"sla","score":0.5}]',
            "done": i % 5 == 4,
            "latency_ms": 20 * rng.random(),
        }
        for j in range(9):
            rec[f"state.user_profile.f{j}"] = 100 * rng.random()
        rec["state.user_profile.credit_score"] = rng.randint(300, 850)
        rec["state.application.channel"] = rng.choice(["web", "branch", "app"])
        rec["state.flags.vip"] = rng.random() < 0.1
        if rng.random() < 0.01:  # 1% bad rows
            rec["state.user_profile.credit_score"] = 9999
        out.append(json.dumps(rec))
    return out


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--chunk-rows", type=int, default=100_000)
    ap.add_argument("--per-row-sample", type=int, default=40)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)

    contract = trace_contract("credit_approval", ACTIONS, FIELDS)
    lines = make_lines(args.rows, args.seed)
    rows, _ = parse_json_lines(lines)
    validate_frame(rows.iloc[:100], contract)  # warm up GE (imports, context)

    t0 = time.perf_counter()
    chunks = [rows.iloc[i : i + args.chunk_rows] for i in range(0, len(rows), args.chunk_rows)]
    accepted = sum(len(validate_frame(c, contract).accepted) for c in chunks)
    chunked_s = time.perf_counter() - t0

    sample = rows.iloc[: args.per_row_sample]
    t0 = time.perf_counter()
    per_row_accepted = sum(len(validate_frame(sample.iloc[[i]], contract).accepted) for i in range(len(sample)))
    per_row_s = time.perf_counter() - t0
    same = per_row_accepted == len(validate_frame(sample, contract).accepted)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp, "landing", "scenario=credit_approval", "date=2026-01-05", "hour=10")
        folder.mkdir(parents=True)
        (folder / "20260105T100500000000Z-bench-1-000000.jsonl").write_text("\n".join(lines) + "\n")
        del rows, chunks, lines
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = time.perf_counter()
        res = capture_landing_zone(
            Storage(f"file://{tmp}"),
            f"file://{tmp}/landing",
            f"file://{tmp}/traces",
            "credit_approval",
            contract,
            START,
            START + timedelta(hours=1),
            chunk_rows=args.chunk_rows,
        )
        capture_s = time.perf_counter() - t0
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    chunked_rps = args.rows / chunked_s
    per_row_rps = len(sample) / per_row_s
    print(f"{'validation':<34}{'rows':>10}{'seconds':>10}{'rows/s':>12}")
    print(f"{'rlops: one GE run per chunk':<34}{args.rows:>10}{chunked_s:>10.2f}{chunked_rps:>12,.0f}")
    print(f"{'naive: one GE run per row':<34}{len(sample):>10}{per_row_s:>10.2f}{per_row_rps:>12,.0f}")
    print(f"speed-up: {chunked_rps / per_row_rps:,.0f}x   same accept/quarantine split on the sample: {same}")
    print(
        f"capture end to end: {res.rows_in} rows in {capture_s:.2f}s "
        f"({res.rows_in / capture_s:,.0f} rows/s), accepted {res.rows_accepted}, quarantined "
        f"{res.rows_quarantined}, peak RSS {rss1 / 1024:.0f} MiB"
    )
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "bench": "capture",
                "rows": args.rows,
                "chunk_rows": args.chunk_rows,
                "columns": len(contract.columns),
                "chunked_rows_per_s": round(chunked_rps),
                "per_row_rows_per_s": round(per_row_rps, 1),
                "speedup": round(chunked_rps / per_row_rps),
                "split_identical": same,
                "accepted": accepted,
                "capture_rows_per_s": round(res.rows_in / capture_s),
                "capture_s": round(capture_s, 2),
                "peak_rss_mib": round(max(rss0, rss1) / 1024),
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
