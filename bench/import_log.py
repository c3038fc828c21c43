"""Benchmark: ``rlops import`` of a week of a recommender's decision log, against capturing the
same decisions from the landing zone as the agent SDK's tracer writes them.

The log: ``--rows`` one-step decisions of the offer-selection pack (80 actions, six user fields),
served over seven days by a uniform logging policy, in another team's shape — its own column names,
items as integers, a propensity, clicks, ISO timestamps — as one parquet file. rlops imports it
through the shipped path (``rlops.pipeline_steps.capture.history.import_log``: read, map, validate
against the contract, write hour partitions by event time). The peer is the capture the same rows
would have taken had the agent traced them: JSON lines in the landing zone's hour folders, read by
``capture_landing_zone`` over the same week. Both validate with the same contract and write the
same partitions; the import adds reading parquet and the mapping. Each side runs ``--repeat``
times into a fresh store, after a warm-up import of 200 rows (imports, Great Expectations' first
use); the median is quoted. The LAST line is one JSON object; the load
average is printed at start and end.

    python bench/import_log.py [--rows 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.common.config import REPO_ROOT  # noqa: E402

START = datetime(2026, 10, 5, tzinfo=UTC)


def foreign_log(rows: int) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """``(the log in its own shape, the same decisions as trace rows, the pack's actions)``."""
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "offer_selection", check_liveness=False)
    traces = rollout_traces(pack, random_policy(3), rows, seed=11, profile="live", source="live")
    seconds = np.sort(np.random.default_rng(0).uniform(0, 7 * 24 * 3600, rows))
    stamps = [START + timedelta(seconds=float(s)) for s in seconds]
    traces["ts"] = stamps
    actions = list(pack.scenario.action_names)
    log = pd.DataFrame(
        {
            "visit": traces["episode_id"].to_numpy(),
            "shown_at": [t.isoformat() for t in stamps],
            "item": traces["action"].map(actions.index).to_numpy(),
            "pscore": np.exp(traces["logp"].to_numpy()),
            "click": traces["reward_total"].to_numpy(),
        }
    )
    for col in [c for c in traces.columns if c.startswith("state.")]:
        log[col.removeprefix("state.")] = traces[col].to_numpy()
    return log, traces, actions


def run_import(log_path: Path, mapping_path: Path) -> tuple[float, int]:
    from rlops.pipeline_steps.capture.history import import_log
    from rlops.pipeline_steps.capture.request import ImportRequest
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create("offer_selection", "20261005T0000")
    t0 = time.perf_counter()
    out = import_log(ctx, ImportRequest(str(log_path), mapping=str(mapping_path), policy_version="recsys"))
    return time.perf_counter() - t0, out.rows_accepted


def run_capture(root: Path) -> tuple[float, int]:
    from rlops.data_contracts.contracts import contract_for
    from rlops.pipeline_steps.capture.core import capture_landing_zone
    from rlops.sandbox.pack import load_pack
    from rlops.storage.backend import Storage

    contract = contract_for(load_pack(REPO_ROOT / "scenarios" / "offer_selection", check_liveness=False))
    t0 = time.perf_counter()
    res = capture_landing_zone(
        Storage(f"file://{root}"),
        f"file://{root}/landing",
        f"file://{root}/traces",
        "offer_selection",
        contract,
        START,
        START + timedelta(days=7),
    )
    return time.perf_counter() - t0, res.rows_accepted


def land(traces: pd.DataFrame, root: Path) -> None:
    """The trace rows as a tracer writes them: JSON lines in the landing zone's hour folders."""
    hours = traces["ts"].map(lambda t: t.replace(minute=0, second=0, microsecond=0))
    for hour, part in traces.groupby(hours):
        folder = root / "landing" / "scenario=offer_selection" / f"date={hour:%Y-%m-%d}" / f"hour={hour:%H}"
        folder.mkdir(parents=True, exist_ok=True)
        text = part.to_json(orient="records", lines=True, date_format="iso")
        (folder / f"{hour:%Y%m%dT%H%M%S}000000Z-bench-1-000000.jsonl").write_text(text)


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)

    import yaml

    log, traces, actions = foreign_log(args.rows)
    imports: list[float] = []
    captures: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        log.to_parquet(work / "recsys.parquet")
        (work / "mapping.yaml").write_text(
            yaml.safe_dump(
                {
                    "columns": {
                        "episode_id": "visit",
                        "ts": "shown_at",
                        "action": "item",
                        "propensity": "pscore",
                        "reward_total": "click",
                    },
                    "actions": {str(i): a for i, a in enumerate(actions)},
                }
            )
        )
        # warm up both paths (Great Expectations' first import alone takes seconds)
        log.head(200).to_parquet(work / "warm.parquet")
        os.environ["RLOPS_STORAGE_ROOT"] = f"file://{work / 'warm'}"
        run_import(work / "warm.parquet", work / "mapping.yaml")
        for i in range(args.repeat):
            store = work / f"import-{i}"
            os.environ["RLOPS_STORAGE_ROOT"] = f"file://{store}"
            seconds, accepted = run_import(work / "recsys.parquet", work / "mapping.yaml")
            assert accepted == args.rows, f"import accepted {accepted} of {args.rows}"
            imports.append(seconds)
            root = work / f"capture-{i}"
            land(traces, root)
            seconds, accepted = run_capture(root)
            assert accepted == args.rows, f"capture accepted {accepted} of {args.rows}"
            captures.append(seconds)
    imp, cap = statistics.median(imports), statistics.median(captures)
    print(f"{'path':<44}{'rows':>10}{'median s':>10}{'rows/s':>12}")
    print(f"{'rlops import (parquet, mapped)':<44}{args.rows:>10}{imp:>10.2f}{args.rows / imp:>12,.0f}")
    print(f"{'peer: capture of the tracer landing files':<44}{args.rows:>10}{cap:>10.2f}{args.rows / cap:>12,.0f}")
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "bench": "import_log",
                "rows": args.rows,
                "repeat": args.repeat,
                "import_s": [round(s, 2) for s in imports],
                "capture_s": [round(s, 2) for s in captures],
                "import_rows_per_s": round(args.rows / imp),
                "capture_rows_per_s": round(args.rows / cap),
                "ratio_import_to_capture": round(cap / imp, 3),
                "load_average": [load_start, load_end],
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
