"""Command-line start-up: how long ``rlops --help`` and ``rlops env validate`` of the credit pack
take, against the floor ``python -c pass``, in one run.

Each command runs as a fresh process (``--runs`` times, median reported) the way a user types it:
the ``rlops`` console script next to this interpreter, with this checkout first on ``PYTHONPATH``
(``python -m rlops.cli`` when the script is not installed). Bars: ``help_s`` < 0.5 s, ``validate_s``
< 3 s. The load average is printed at the start and the end, since on a shared machine it moves
the figures; the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per command (median reported)")
    ap.add_argument("--pack", default="scenarios/credit_approval")
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
    validate_s = median_seconds([*rlops, "env", "validate", "--scenario", args.pack], args.runs, env)
    load_end = load_average()
    print(f"python -c pass:      {python_s:6.3f} s")
    print(f"rlops --help:        {help_s:6.3f} s   (bar: < 0.5 s)")
    print(f"rlops env validate:  {validate_s:6.3f} s   (bar: < 3 s)")
    print(f"load average at end: {load_end}")
    print(
        json.dumps(
            {
                "help_s": round(help_s, 3),
                "validate_s": round(validate_s, 3),
                "python_s": round(python_s, 3),
                "runs": args.runs,
                "help_ok": help_s < 0.5,
                "validate_ok": validate_s < 3.0,
                "load_avg_start": load_start,
                "load_avg_end": load_end,
            }
        )
    )


if __name__ == "__main__":
    main()
