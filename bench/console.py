"""Benchmark: page times of ``rlops console`` on a trace store of a million rows.

1. The demo's loop (``rlops.demo``) runs once in a temporary home (or ``--home`` reuses one):
   a real MLflow SQLite registry with a champion, its evaluation, drift and calibration runs.
2. The demo's trace rows (rule engine and champion traffic) are tiled, vectorised, to ``--rows``
   rows with fresh episode and trace ids, written in the trace store's real layout
   (``traces/scenario=<s>/date=<d>/hour=<h>/part-<run_key>-00000.parquet``), one partition per
   hour; the console's cache is cleared.
3. The app runs in-process (Starlette's TestClient, no network) and every page is fetched once
   (the first load: the per-digest aggregates are computed here) and then ``--repeats`` times.

Prints the load average at start and end, and as the LAST line one JSON object: first-load and
p50/p95 milliseconds per page after the first load, the overall p95, and the bar (< 300 ms).

    python bench/console.py [--rows 1000000] [--repeats 30] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SCENARIO = "credit_approval"
BAR_MS = 300.0


def ensure_demo(home: Path) -> None:
    """Run the demo's loop in ``home`` unless it already holds a champion, then capture an hour
    of champion traffic so the store holds both rule-engine and champion rows."""
    os.environ["RLOPS_HOME"] = str(home)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if (home / "rlops-data" / "mlflow.db").exists():
        return
    from rlops import demo

    if demo.run(SCENARIO) != 0:
        raise SystemExit("the demo did not promote a champion; the console pages would have no champion")
    from datetime import datetime, timedelta

    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.context import StepContext

    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    capture_step(
        StepContext.create(SCENARIO, hour.strftime("%Y%m%dT%H%M")),
        CaptureRequest(simulate=True, profile="live", episodes=2000),
    )


def build_store(home: Path, rows: int) -> dict[str, Any]:
    """Tile the demo's trace rows to ``rows`` rows, one parquet partition per hour."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = home / "rlops-data" / "traces" / f"scenario={SCENARIO}"
    base = pd.concat([pd.read_parquet(f) for f in sorted(root.rglob("*.parquet"))], ignore_index=True)
    bench_root = home / "rlops-data" / "traces-bench"
    shutil.rmtree(bench_root, ignore_errors=True)
    copies = -(-rows // len(base))
    per_hour = max(1, copies // 48)  # about 48 hourly partitions
    start = pd.Timestamp("2026-01-05T00:00:00Z")
    written, files = 0, 0
    for first in range(0, copies, per_hour):
        group = range(first, min(first + per_hour, copies))
        part = pd.concat([base] * len(group), ignore_index=True)
        rep = pd.Series(pd.array([k for k in group for _ in range(len(base))], dtype="int64")).astype(str)
        part["episode_id"] = part["episode_id"].astype(str) + "-r" + rep
        part["trace_id"] = part["trace_id"].astype(str) + "-r" + rep
        hour = start + pd.Timedelta(hours=first // per_hour)
        part["ts"] = hour + (pd.to_datetime(part["ts"], utc=True) - pd.to_datetime(part["ts"], utc=True).dt.floor("h"))
        part = part.iloc[: rows - written]
        folder = (
            root.parent.parent / "traces-bench" / f"scenario={SCENARIO}" / f"date={hour:%Y-%m-%d}" / f"hour={hour.hour}"
        )
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            pa.Table.from_pandas(part, preserve_index=False), folder / f"part-{hour:%Y%m%dT%H%M}-00000.parquet"
        )
        written, files = written + len(part), files + 1
        if written >= rows:
            break
    return {"rows": written, "files": files, "base_rows": len(base)}


def timed(client: Any, url: str) -> float:
    t0 = time.perf_counter()
    r = client.get(url)
    ms = (time.perf_counter() - t0) * 1000
    if r.status_code != 200:
        raise SystemExit(f"{url} answered {r.status_code}: {r.text[:300]}")
    return ms


def pages(client: Any) -> dict[str, str]:
    import re

    promo = client.get(f"/s/{SCENARIO}/promotion").text
    run = re.search(r'id="champion-gates" href="([^"]+)"', promo).group(1)
    page = client.get(f"/s/{SCENARIO}/map").text
    trace = re.search(rf'href="(/s/{SCENARIO}/episode/[^"]+)"', page).group(1)
    return {
        "decision_map": f"/s/{SCENARIO}/map",
        "decision_map_rules": f"/s/{SCENARIO}/map?version=rules",
        "episode_replay": trace,
        "champion_vs_candidate": f"/s/{SCENARIO}/promotion",
        "gate_table": run,
        "drift_calibration": f"/s/{SCENARIO}/drift",
        "reward_functions": f"/s/{SCENARIO}/rewards",
        "reward_diff": f"/s/{SCENARIO}/rewards/diff?a=v0&b=v1",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--home", type=Path, default=None, help="a demo home to reuse (default: a new temp folder)")
    args = ap.parse_args(argv)
    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}", flush=True)
    home = args.home or Path(tempfile.mkdtemp(prefix="rlops-console-bench-"))
    t0 = time.perf_counter()
    ensure_demo(home.resolve())
    store = build_store(home.resolve(), args.rows)
    print(
        f"store: {store['rows']:,} rows in {store['files']} hourly partitions ({time.perf_counter() - t0:.0f}s)",
        flush=True,
    )
    shutil.rmtree(home / "rlops-data" / "console-cache", ignore_errors=True)

    import numpy as np
    from fastapi.testclient import TestClient

    from rlops.common.config import load_params
    from rlops.console.app import create_app
    from rlops.console.data import ProjectData

    params = load_params(overrides={"capture": {"trace_dir": "traces-bench"}})
    client = TestClient(create_app(ProjectData(params), mlflow_ui="http://127.0.0.1:5000"))
    first: dict[str, float] = {}
    t1 = time.perf_counter()
    urls = pages(client)  # builds the overview and the champion's map: part of the first load
    warm_up_ms = (time.perf_counter() - t1) * 1000
    for name, url in urls.items():
        first[name] = timed(client, url)
    times: dict[str, list[float]] = {name: [] for name in urls}
    for _ in range(args.repeats):
        for name, url in urls.items():
            times[name].append(timed(client, url))
    per_page = {
        name: {
            "first_ms": round(first[name], 1),
            "p50_ms": round(float(np.percentile(v, 50)), 1),
            "p95_ms": round(float(np.percentile(v, 95)), 1),
        }
        for name, v in times.items()
    }
    overall = float(np.percentile([t for v in times.values() for t in v], 95))
    load_end = os.getloadavg()
    print(f"load average at end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}", flush=True)
    print(
        json.dumps(
            {
                "bench": "console",
                "rows": store["rows"],
                "partitions": store["files"],
                "repeats": args.repeats,
                "first_load_ms": round(warm_up_ms, 1),
                "pages": per_page,
                "overall_p95_ms": round(overall, 1),
                "bar_ms": BAR_MS,
                "passed": overall < BAR_MS,
                "loadavg_start": [round(x, 2) for x in load_start],
                "loadavg_end": [round(x, 2) for x in load_end],
                "cpus": os.cpu_count(),
            }
        )
    )
    return 0 if overall < BAR_MS else 1


if __name__ == "__main__":
    sys.exit(main())
