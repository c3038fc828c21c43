"""Benchmark: peak memory of capturing an OTLP/JSON export, streamed, against reading it whole.

One export file holds ``--spans`` tiny decision spans in one document (the worst case for a reader:
no line breaks to split on). rlops' capture (:func:`rlops.pipeline_steps.capture.trace_sources.otlp_source`
through the one capture writer: contract, quarantine, parquet partitions) runs in a subprocess of
its own, and so does the floor of any whole-document reader: ``json.loads`` of the file plus one
text line per span, before any validation. Each side reports its peak RSS; the ratio is
whole / streamed. The LAST line is one JSON object with the figures.

    python bench/capture_otlp.py [--spans 1000000] [--chunk-rows 100000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402

START = datetime(2026, 1, 5, 10, tzinfo=UTC)
ACTIONS = ["screen", "approve", "reject"]


def write_export(path: Path, n: int) -> None:
    with path.open("w") as fh:
        fh.write(
            '{"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "b"}, "spans": ['
        )
        for i in range(n):
            rec = {
                "trace_id": f"t{i}",
                "episode_id": f"e{i // 4}",
                "step": i % 4,
                "ts": (START + timedelta(seconds=i * 3000 / n)).isoformat(),
                "scenario": "bench",
                "source": "live",
                "policy_version": "p-1",
                "state": {"x": i % 7},
                "action": ACTIONS[i % 3],
                "action_mask": "111",
                "done": i % 4 == 3,
            }
            span = {
                "traceId": f"{i:032x}",
                "spanId": f"{i:016x}",
                "name": "decision",
                "attributes": [{"key": "rlops.record", "value": {"stringValue": json.dumps(rec)}}],
            }
            fh.write(("," if i else "") + json.dumps(span))
        fh.write("]}]}]}")


def side_rlops(file: Path, chunk_rows: int) -> dict[str, float]:
    from rlops.data_contracts.contracts import trace_contract
    from rlops.pipeline_steps.capture.core import write_capture
    from rlops.pipeline_steps.capture.trace_sources import otlp_source
    from rlops.storage.backend import Storage

    contract = trace_contract("bench", ACTIONS, [("x", "int", 0, 10, None)])
    storage = Storage(f"file://{file.parent}")
    t0 = time.perf_counter()
    res = write_capture(
        storage,
        otlp_source(storage, f"file://{file}"),
        f"file://{file.parent}/traces",
        "bench",
        contract,
        START,
        START + timedelta(hours=1),
        chunk_rows=chunk_rows,
    )
    seconds = time.perf_counter() - t0
    return {
        "rows_in": res.rows_in,
        "rows_accepted": res.rows_accepted,
        "seconds": seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def side_whole(file: Path) -> dict[str, float]:
    t0 = time.perf_counter()
    doc = json.loads(file.read_text())
    lines = [
        json.dumps({a["key"]: a["value"] for a in s["attributes"]})
        for rs in doc["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]
    seconds = time.perf_counter() - t0
    return {
        "rows_in": len(lines),
        "seconds": seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run_side(side: str, file: Path, chunk_rows: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--side", side, "--file", str(file), "--chunk-rows", str(chunk_rows)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", type=int, default=1_000_000)
    ap.add_argument("--chunk-rows", type=int, default=100_000)
    ap.add_argument("--side", choices=["rlops", "whole"], help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        fn = side_rlops(Path(args.file), args.chunk_rows) if args.side == "rlops" else side_whole(Path(args.file))
        print(json.dumps(fn))
        return 0
    load_start = report_load("start")
    with tempfile.TemporaryDirectory(prefix="rlops-otlp-bench-") as tmp:
        file = Path(tmp) / "spans.json"
        write_export(file, args.spans)
        size_mib = file.stat().st_size / 2**20
        streamed = run_side("rlops", file, args.chunk_rows)
        whole = run_side("whole", file, args.chunk_rows)
    ratio = whole["peak_rss_mib"] / streamed["peak_rss_mib"]
    print(f"{args.spans:,} spans, {size_mib:.0f} MiB export")
    print(
        f"rlops capture (streamed, validated, written): {streamed['rows_in']:,} rows in {streamed['seconds']:.1f} s, "
        f"peak RSS {streamed['peak_rss_mib']:.0f} MiB"
    )
    print(
        f"whole-document read only (json.loads + lines): peak RSS {whole['peak_rss_mib']:.0f} MiB "
        f"in {whole['seconds']:.1f} s"
    )
    print(f"memory ratio whole / streamed: {ratio:.2f}x")
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "bench": "capture_otlp",
                "spans": args.spans,
                "export_mib": round(size_mib),
                "streamed_peak_rss_mib": round(streamed["peak_rss_mib"]),
                "streamed_seconds": round(streamed["seconds"], 1),
                "streamed_rows_per_s": round(streamed["rows_in"] / streamed["seconds"]),
                "whole_peak_rss_mib": round(whole["peak_rss_mib"]),
                "ratio_whole_over_streamed": round(ratio, 2),
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
