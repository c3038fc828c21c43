"""Command-line start-up: how long ``rlops --help``, ``rlops config validate`` and ``rlops env
validate`` of the credit pack take, against the floor ``python -c pass``, in one run.

Each command runs as a fresh process (``--runs`` times, median reported) the way a user types it:
the ``rlops`` console script next to this interpreter, with this checkout first on ``PYTHONPATH``
(``python -m rlops.cli`` when the script is not installed). Bars: ``help_s`` < 0.5 s,
``config_validate_s`` < 1 s, ``validate_s`` < 1.5 s. The load average is printed at the start and
the end, since on a shared machine it moves the figures; the last line is one JSON object.
``--record HOST_CLASS`` appends the run to ``bench/results/cli_startup.<HOST_CLASS>.json`` (then
``python bench/results_table.py`` rewrites the table of docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
BARS = {"help_s": 0.5, "config_validate_s": 1.0, "validate_s": 1.5}


def rlops_argv() -> list[str]:
    script = Path(sys.executable).with_name("rlops")
    return [str(script)] if script.exists() else [sys.executable, "-m", "rlops.cli"]


def median_seconds(argv: list[str], runs: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def record(path: Path, host_class: str, figures: dict[str, Any], runs: int, note: str) -> None:
    """Append this run to the results file of ``host_class`` (created when it is the first)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False
    ).stdout.strip()
    doc: dict[str, Any] = (
        json.loads(path.read_text())
        if path.exists()
        else {"bench": "cli_startup", "host_class": host_class, "host": note, "runs": []}
    )
    doc["runs"].append(
        {
            "date": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "commit": commit or "unknown",
            "command": "bench/cli_startup.py",
            "what": f"median of {runs} runs",
            "host": note,
            "load_average": [[figures["load_avg_start"][0], figures["load_avg_end"][0]]],
            "rlops": (
                f"`rlops --help` {figures['help_s']:.3f} s; "
                f"`rlops config validate` {figures['config_validate_s']:.2f} s; "
                f"`rlops env validate` of the credit pack (child-process check included) {figures['validate_s']:.2f} s"
            ),
            "peer": f"`python -c pass` {figures['python_s']:.3f} s",
            "ratio": "—",
            "bar": "help < 0.5 s, config validate < 1 s, env validate < 1.5 s",
            "bar_met": all(figures[k] < bar for k, bar in BARS.items()),
            "figures": {k: figures[k] for k in ("help_s", "config_validate_s", "validate_s", "python_s")},
        }
    )
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    print(f"recorded in {path.relative_to(REPO)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs per command (median reported)")
    ap.add_argument("--pack", default="scenarios/credit_approval")
    ap.add_argument(
        "--record", metavar="HOST_CLASS", help="append the run to bench/results/cli_startup.<HOST_CLASS>.json"
    )
    ap.add_argument("--note", default="", help="with --record: what the host was doing (e.g. 'busy: other test runs')")
    args = ap.parse_args()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    load_start = load_average()
    print(f"load average at start: {load_start}", flush=True)
    rlops = rlops_argv()
    python_s = median_seconds([sys.executable, "-c", "pass"], args.runs, env)
    help_s = median_seconds([*rlops, "--help"], args.runs, env)
    config_s = median_seconds([*rlops, "config", "validate"], args.runs, env)
    validate_s = median_seconds([*rlops, "env", "validate", "--scenario", args.pack], args.runs, env)
    load_end = load_average()
    print(f"python -c pass:        {python_s:6.3f} s")
    print(f"rlops --help:          {help_s:6.3f} s   (bar: < {BARS['help_s']} s)")
    print(f"rlops config validate: {config_s:6.3f} s   (bar: < {BARS['config_validate_s']} s)")
    print(f"rlops env validate:    {validate_s:6.3f} s   (bar: < {BARS['validate_s']} s)")
    print(f"load average at end: {load_end}")
    figures: dict[str, Any] = {
        "help_s": round(help_s, 3),
        "config_validate_s": round(config_s, 3),
        "validate_s": round(validate_s, 3),
        "python_s": round(python_s, 3),
        "runs": args.runs,
        "help_ok": help_s < BARS["help_s"],
        "config_validate_ok": config_s < BARS["config_validate_s"],
        "validate_ok": validate_s < BARS["validate_s"],
        "load_avg_start": load_start,
        "load_avg_end": load_end,
    }
    if args.record:
        record(RESULTS / f"cli_startup.{args.record}.json", args.record, figures, args.runs, args.note)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
