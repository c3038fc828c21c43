"""Reward what-ifs on every built-in pack: wall time and whether the KPIs move the way the weight says.

For each pack, two what-ifs through the command line (``rlops reward whatif --json``, what an expert
runs): one objective weight raised, one lowered. Each runs ``--repeats`` times (default 3) in a
fresh home without a registered champion, so the baseline is a policy trained the same way under
the current reward: an extra first run of the pack's first what-if trains it (``wall_s_cold``), the
timed runs find it kept. Reported per pack:

* ``wall_s_median``: the slower of the two what-ifs' median wall times (baseline kept);
* ``wall_s_cold``: the first what-if's wall time, the baseline's training included;
* ``cpu_s_median``, ``cpu_s_cold``: the same in CPU seconds of the command (user + system): one
  torch thread, so on an idle machine the wall time is about this; on a loaded one, compare these;
* ``direction_ok``: both what-ifs moved the KPIs tied to the weight's rules the way the weight says
  (raised: one improves beyond its interval and none worsens; lowered: the reverse);
* ``kpis_with_interval``: KPIs answered with a 95 % interval for both policies (of the pack's total).

The load average is printed at start and end and with every what-if; the last line is one JSON
object ``{"packs": {name: {...}}, "load_start": [...], "load_end": [...]}``. The target is under
60 s per what-if on 2 cores.

Usage: python bench/whatif.py [--packs credit_approval,complaint_handling] [--repeats 3] [--episodes 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import load_average, report  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RLOPS = str(Path(sys.executable).parent / "rlops")

#: Per pack: one weight raised, one lowered — objectives whose rules the pack's KPIs measure.
WHATIFS: dict[str, list[str]] = {
    "credit_approval": ["compliance=3", "compliance=0.3"],
    "credit_approval_cx": ["compliance=3", "compliance=0.3"],
    "complaint_handling": ["retention=2", "retention=0.5"],
    "loan_desk": ["operations=2", "operations=0.3"],
}


def run_whatif(pack: str, change: str, episodes: int, env: dict[str, str]) -> tuple[float, float, dict[str, Any]]:
    """Wall seconds, CPU seconds (user + system of the command) and the JSON result of one what-if."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(
        [RLOPS, "reward", "whatif", "--scenario", pack, "--set", change, "--episodes", str(episodes), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise SystemExit(f"rlops reward whatif --scenario {pack} --set {change} failed: {out.stderr[-2000:]}")
    return wall, cpu, json.loads(out.stdout)


def with_interval(result: dict[str, Any]) -> tuple[int, int]:
    """KPIs of the overall block whose figure and interval are there for both policies."""
    kpis = result["segments"]["overall"]["kpis"]
    ok = sum(
        all(v[side]["low"] is not None and v[side]["high"] is not None for side in ("champion", "whatif"))
        for v in kpis.values()
    )
    return ok, len(kpis)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packs", default=",".join(WHATIFS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=4000)
    args = ap.parse_args(argv)
    load_start = report("start")
    packs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rlops-bench-whatif-") as home:
        env = {**os.environ, "RLOPS_HOME": home, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
        for var in ("RLOPS_PARAMS", "RLOPS_STORAGE_ROOT", "MLFLOW_TRACKING_URI"):
            env.pop(var, None)
        for pack in args.packs.split(","):
            whatifs: list[dict[str, Any]] = []
            # the pack's first what-if, once more beforehand: it trains and keeps the baseline
            cold, cold_cpu, _ = run_whatif(pack, WHATIFS[pack][0], args.episodes, env)
            print(
                f"{pack:20} {WHATIFS[pack][0]:16} cold:  {cold:6.1f} s wall {cold_cpu:5.1f} CPU-s "
                f" load {load_average()}",
                flush=True,
            )
            for change in WHATIFS[pack]:
                walls: list[float] = []
                cpus: list[float] = []
                last: dict[str, Any] = {}
                for i in range(args.repeats):
                    wall, cpu, last = run_whatif(pack, change, args.episodes, env)
                    walls.append(wall)
                    cpus.append(cpu)
                    print(
                        f"{pack:20} {change:16} run {i + 1}: {wall:6.1f} s wall {cpu:5.1f} CPU-s "
                        f" load {load_average()}",
                        flush=True,
                    )
                objective = change.split("=", 1)[0]
                direction = last["direction"][objective]
                n_ok, n_all = with_interval(last)
                whatifs.append(
                    {
                        "change": change,
                        "wall_s": [round(w, 1) for w in walls],
                        "wall_s_median": round(statistics.median(walls), 1),
                        "cpu_s": [round(c, 1) for c in cpus],
                        "cpu_s_median": round(statistics.median(cpus), 1),
                        "direction_ok": direction["ok"],
                        "improved": direction["improved"],
                        "worsened": direction["worsened"],
                        "kpis_with_interval": n_ok,
                        "kpis": n_all,
                        "training_cpu_s": last["training"]["whatif"]["cpu_s"],
                        "decision_map_changed": last["decision_map"]["changed"],
                    }
                )
                print(
                    f"{pack:20} {change:16} median {whatifs[-1]['wall_s_median']:.1f} s  direction_ok {direction['ok']}"
                    f"  improved {direction['improved']}  worsened {direction['worsened']}  "
                    f"KPIs with interval {n_ok}/{n_all}",
                    flush=True,
                )
            packs[pack] = {
                "wall_s_median": max(w["wall_s_median"] for w in whatifs),
                "wall_s_cold": round(cold, 1),
                "cpu_s_median": max(w["cpu_s_median"] for w in whatifs),
                "cpu_s_cold": round(cold_cpu, 1),
                "direction_ok": all(w["direction_ok"] is True for w in whatifs),
                "kpis_with_interval": min(w["kpis_with_interval"] for w in whatifs),
                "kpis": whatifs[0]["kpis"],
                "under_60s": max(w["wall_s_median"] for w in whatifs) < 60.0,
                "whatifs": whatifs,
            }
    load_end = report("end")
    print(
        json.dumps(
            {
                "packs": packs,
                "repeats": args.repeats,
                "episodes": args.episodes,
                "load_start": load_start,
                "load_end": load_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
