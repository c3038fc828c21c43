"""Benchmark: a week of traces (50M rows by default) read through DuckDB, beside the pandas path.

1. The demo's loop (``rlops.demo``) runs once in a temporary home (or ``--home`` reuses one): a real
   MLflow registry with a champion, and the demo's captured trace rows (rule engine and champion).
2. Those rows are tiled to ``--rows`` rows over ``--days`` days in the trace store's real layout
   (``traces-bench/scenario=<s>/date=<d>/hour=<h>/part-<run_key>-00000.parquet``, one file per hour,
   written with the store's own parquet options: zstd, bloom filters on the ids), with fresh ids in
   the simulated-traffic format (``<scenario>-<run_key>-<n>``, ``<episode>-<step>``). Vectorised
   Arrow, one file at a time. ``--reuse`` (with ``--home``) keeps the store and, on the next run
   with the same ``--rows`` and ``--days``, measures it again instead of rebuilding it.
3. Each measurement runs in a child process of its own, once per engine (``trace_store.engine``
   ``duckdb``, then ``pandas``), with its peak RSS from ``wait4`` and, beside the wall-clock
   ``seconds``, the process's CPU seconds over the same span (``cpu_s``, every thread counted: on a
   shared machine the figure that does not grow with other people's load):

   * ``replay``: the lookup of one trace id of the middle day and its episode (the first query of
     the process: footers and bloom filters read cold), then ``rlops replay``'s whole step for it
     (``step_s``: the pack loaded and checked, the lookup, the serving policy's probabilities);
   * ``console``: the console's first load (overview + the champion's decision map) and then every
     page ``--repeats`` times (p95 over them all), in-process through Starlette's TestClient;
   * ``drift_day``: the drift monitor's step over the last day's window (``drift.window_hours: 24``)
     against the sandbox baseline (rolled out once beforehand, outside the timings);
   * ``label_queue``: ``rlops labels run`` over its configured window (24 hours);
   * ``drift_fanned`` (DuckDB only): the drift check over the last ``--fan-hours`` hours (24 by
     default: the same day) fanned out as the drift_monitor DAG does with ``drift.slice_hours``
     (``--slice-hours``, 6 by default): the plan, then one ``summarise_slice`` task per slice run by
     ``--workers`` warm worker processes (2 by default, as Celery workers would; here on the same
     machine), then ``detect_drift`` reducing their counts — the same task functions the DAG calls.
     Its verdicts are compared with one task's over the same window (``drift_day``, or with another
     ``--fan-hours`` the ``drift_window`` measurement, run just before it).

   A pandas child past ``--pandas-timeout`` seconds or ``--pandas-max-gb`` of RSS is stopped and
   reported as not finished. Bars: replay < 1 s, console first load < 5 s, page p95 < 300 ms, a
   day's drift < 15 s, a label-queue run < 60 s, peak RSS < 3 GB each.

Prints the load average at start and end, and as the LAST line one JSON object. The store is deleted
afterwards unless ``--keep``.

    python bench/trace_scale.py [--rows 50000000] [--days 7] [--home DIR] [--keep] [--reuse] [--no-pandas]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCENARIO = "credit_approval"
STORE_DIR = "traces-bench"
STORE_INFO = "_bench_store.json"  # beside the partitions; the reader lists only parquet files
START = datetime(2026, 1, 5, tzinfo=UTC)
MEASURES = ("replay", "console", "drift_day", "label_queue", "drift_fanned")
BARS = {
    "replay_s": 1.0,
    "console_first_load_s": 5.0,
    "console_page_p95_ms": 300.0,
    "drift_day_s": 15.0,
    "label_queue_s": 60.0,
    "peak_rss_gb": 3.0,
}


def _console_bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_console", ROOT / "bench" / "console.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --------------------------------------------------------------------------- the store
def build_store(home: Path, rows: int, days: int) -> dict[str, Any]:
    """Tile the demo's trace rows to ``rows`` rows, one hourly partition file at a time."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from rlops.trace_store.store import parquet_options, partition_path

    src = home / "rlops-data" / "traces" / f"scenario={SCENARIO}"
    files = sorted(str(p) for p in src.rglob("*.parquet"))
    base = pa.concat_tables([pq.read_table(f) for f in files], promote_options="default").combine_chunks()
    root = home / "rlops-data" / STORE_DIR
    shutil.rmtree(root, ignore_errors=True)
    codes = pc.dictionary_encode(base["episode_id"]).combine_chunks().indices.to_numpy().astype(np.int64)
    n_eps = int(codes.max()) + 1
    steps = pc.cast(base["step"], pa.string())
    ts_us = pc.cast(base["ts"], pa.int64()).to_numpy()
    offset_us = ts_us % 3_600_000_000
    hours = days * 24
    per_hour = [rows // hours + (1 if h < rows % hours else 0) for h in range(hours)]
    t0, written, nbytes, probe = time.perf_counter(), 0, 0, ""
    for h, n in enumerate(per_hour):
        hour = START + timedelta(hours=h)
        run_key = f"{hour:%Y%m%dT%H%M}"
        start = (h * n) % len(base)  # each hour starts further into the base rows: every policy's traffic shows
        k = -(-(start + n) // len(base))
        big = pa.concat_tables([base] * k).slice(start, n)
        pos = np.arange(start, start + n, dtype=np.int64)
        ep_num = codes[pos % len(base)] + n_eps * (pos // len(base))
        episode = pc.binary_join_element_wise(f"{SCENARIO}-{run_key}-", pc.cast(pa.array(ep_num), pa.string()), "")
        trace = pc.binary_join_element_wise(
            episode, pa.chunked_array([steps.combine_chunks()] * k).slice(start, n), "-"
        )
        hour_us = int(hour.timestamp() * 1_000_000)
        ts = pa.array(offset_us[pos % len(base)] + hour_us, pa.int64()).cast(base.schema.field("ts").type)
        table = (
            big.set_column(big.schema.get_field_index("episode_id"), "episode_id", episode)
            .set_column(big.schema.get_field_index("trace_id"), "trace_id", trace)
            .set_column(big.schema.get_field_index("ts"), "ts", ts)
        )
        folder = root / partition_path(scenario=SCENARIO, date=f"{hour:%Y-%m-%d}", hour=hour.hour)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"part-{run_key}-00000.parquet"
        pq.write_table(table, path, **parquet_options(n))
        if h == (days // 2) * 24 + 12:  # the middle day's noon: the trace id replay looks up
            probe = str(trace[n // 2])
        written, nbytes = written + n, nbytes + path.stat().st_size
        if h % 24 == 23:
            print(
                f"  day {h // 24 + 1}: {written:,} rows, {nbytes / 2**30:.2f} GiB, {time.perf_counter() - t0:.0f}s",
                flush=True,
            )
    return {
        "rows": written,
        "files": hours,
        "base_rows": base.num_rows,
        "gib": round(nbytes / 2**30, 2),
        "build_s": round(time.perf_counter() - t0, 1),
        "trace_id": probe,
    }


def reused_store(home: Path, rows: int, days: int) -> dict[str, Any] | None:
    """What :func:`build_store` returned when it built the store now under ``home`` with the same
    ``rows`` and ``days`` (recorded beside it), else None."""
    info = home / "rlops-data" / STORE_DIR / STORE_INFO
    try:
        store: dict[str, Any] = json.loads(info.read_text())
    except (OSError, ValueError):
        return None
    same = store.get("rows") == rows and store.get("files") == days * 24
    return store if same else None


def last_run_key(days: int) -> str:
    return f"{START + timedelta(days=days) - timedelta(hours=1):%Y%m%dT%H%M}"


# --------------------------------------------------------------------------- measurements (child side)
def child_overrides(
    home: Path, engine: str, slice_hours: float | None = None, window_hours: float = 24
) -> dict[str, Any]:
    return {
        "capture": {"trace_dir": STORE_DIR},
        "trace_store": {"engine": engine},
        "drift": {"window_hours": window_hours, "slice_hours": slice_hours},
        "label_queue": {"db_url": f"sqlite:///{home}/rlops-data/queue-{engine}.db"},
    }


def child_params(home: Path, engine: str, window_hours: float = 24) -> dict[str, Any]:
    from rlops.common.config import load_params

    return load_params(overrides=child_overrides(home, engine, window_hours=window_hours))


def fanned_params_file(home: Path, slice_hours: float, window_hours: float) -> Path:
    """A params file for the fanned drift check: the DAG's task functions read theirs from
    ``RLOPS_PARAMS``, as on a Celery worker."""
    import yaml

    from rlops.common.config import deep_merge

    defaults = yaml.safe_load((ROOT / "params.yaml").read_text())
    params = deep_merge(defaults, child_overrides(home, "duckdb", slice_hours, window_hours))
    path = home / "params-drift-fanned.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _warm_worker() -> None:
    """A worker process as a Celery worker that has run tasks before is: its libraries imported,
    the store's layout read once."""
    import duckdb  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow.compute  # noqa: F401
    import pyarrow.dataset  # noqa: F401

    import rlops.pipeline_steps.drift.check  # noqa: F401
    import rlops.pipeline_steps.drift.fan_out  # noqa: F401
    import rlops.pipeline_steps.drift.stats  # noqa: F401
    import rlops.pipeline_steps.drift.window  # noqa: F401
    import rlops.pipeline_steps.drift.window_detect  # noqa: F401
    import rlops.pipeline_steps.infra.prefetch  # noqa: F401
    import rlops.pipeline_steps.orchestration.tasks  # noqa: F401
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create(SCENARIO, START.strftime("%Y%m%dT%H%M"))
    ctx.traces.reader.columns(ctx.traces.scenario_uri(SCENARIO))


def _slice_task(conf: dict[str, Any], drift_slice: dict[str, Any]) -> tuple[dict[str, Any] | None, float, float]:
    import resource

    from rlops.pipeline_steps.orchestration import tasks

    t0 = time.perf_counter()
    out = tasks.summarise_drift_slice(conf, drift_slice)
    return out, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def drift_fanned(home: Path, days: int, slice_hours: float, workers: int, window_hours: float) -> dict[str, Any]:
    """The fanned-out drift check through the DAG's task functions (see the module)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from rlops.pipeline_steps.orchestration import tasks

    os.environ["RLOPS_PARAMS"] = str(fanned_params_file(home, slice_hours, window_hours))
    conf = {"scenario": SCENARIO, "run_key": last_run_key(days), "reward_fn": "v1", "dry_run": False}
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_warm_worker) as pool:
        list(pool.map(time.sleep, [0.5] * workers))  # every worker started and warm before the clock
        t0, c0 = time.perf_counter(), time.process_time()
        plan = tasks.plan_drift_slices(conf)
        planned = time.perf_counter() - t0
        done = list(pool.map(_slice_task, [conf] * len(plan), plan))
        mapped = time.perf_counter() - t0 - planned
        t1 = time.perf_counter()
        out = tasks.detect_drift(conf, [d[0] for d in done])
        reduced = time.perf_counter() - t1
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "seconds": wall,
        "cpu_s_reduce_process": cpu,
        "plan_s": planned,
        "slices_s": mapped,
        "reduce_s": reduced,
        "window_hours": window_hours,
        "slices": len(plan),
        "workers": workers,
        "slice_task_s": [round(d[1], 2) for d in done],
        "worker_peak_rss_gb": round(max(d[2] for d in done), 2),
        "drifted_fields": len(out["drifted_fields"]),
        "drifted": out["drifted_fields"],
        "summary": out["summary"],
    }


def measure(
    name: str,
    engine: str,
    home: Path,
    days: int,
    repeats: int,
    trace_id: str,
    fan: tuple[float, int, float] = (6.0, 2, 24.0),
) -> dict[str, Any]:
    """One measurement. The process's library imports (torch, the sandbox, pandas, DuckDB, MLflow,
    scipy, matplotlib) happen before the clock starts: a long-running console or worker has paid
    them already."""
    import duckdb  # noqa: F401
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401
    import mlflow  # noqa: F401
    import mlflow.store.tracking.sqlalchemy_store  # noqa: F401
    import pandas  # noqa: F401
    import scipy.stats  # noqa: F401
    import torch  # noqa: F401

    import rlops.sandbox.pack  # noqa: F401
    from rlops.pipeline_steps.infra.context import StepContext

    if name == "drift_fanned":
        return drift_fanned(home, days, *fan)
    params = child_params(home, engine, fan[2] if name == "drift_window" else 24)
    ctx = StepContext.create(SCENARIO, last_run_key(days), params=params)
    if name == "baseline":
        from rlops.pipeline_steps.drift.check import sandbox_baseline
        from rlops.sandbox.profiles import default_profile

        pack = ctx.load_pack()
        t0, c0 = time.perf_counter(), time.process_time()
        df, _ = sandbox_baseline(
            ctx,
            pack,
            default_profile(pack, "sandbox"),
            int(ctx.section("drift").get("baseline_episodes", 2000)),
            ctx.reward_choice().reward_fn,
            ctx.config.seed,
        )
        return {"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "rows": len(df)}
    if name == "replay":
        from rlops.pipeline_steps.audit.replay import find_episode, replay

        t0, c0 = time.perf_counter(), time.process_time()
        rows = find_episode(ctx.traces.reader, ctx.traces.scenario_uri(SCENARIO), trace_id)
        lookup, lookup_cpu = time.perf_counter() - t0, time.process_time() - c0
        t1 = time.perf_counter()
        path = replay(ctx, trace_id)
        return {
            "seconds": lookup,
            "cpu_s": lookup_cpu,
            "step_s": time.perf_counter() - t1,
            "episode_steps": path.episode_steps,
            "rows": len(rows),
            "probabilities": path.steps[0].probability_source,
        }
    if name == "console":
        import numpy as np
        from fastapi.testclient import TestClient

        from rlops.console.app import create_app
        from rlops.console.data import ProjectData

        cb = _console_bench()
        shutil.rmtree(home / "rlops-data" / "console-cache", ignore_errors=True)
        client = TestClient(create_app(ProjectData(params), mlflow_ui="http://127.0.0.1:5000"))
        t0, c0 = time.perf_counter(), time.process_time()
        urls = cb.pages(client)  # the overview and the champion's map: the first load
        first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
        firsts = {n: cb.timed(client, u) for n, u in urls.items()}
        times: dict[str, list[float]] = {n: [] for n in urls}
        for _ in range(repeats):
            for n, u in urls.items():
                times[n].append(cb.timed(client, u))
        every = [t for v in times.values() for t in v]
        return {
            "seconds": first,
            "cpu_s": first_cpu,
            "page_p95_ms": float(np.percentile(every, 95)),
            "pages": {
                n: {"first_ms": round(firsts[n], 1), "p95_ms": round(float(np.percentile(v, 95)), 1)}
                for n, v in times.items()
            },
        }
    if name in ("drift_day", "drift_window"):
        from rlops.pipeline_steps.drift.check import drift_check

        t0, c0 = time.perf_counter(), time.process_time()
        out = drift_check(ctx)
        return {
            "seconds": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0,
            "drifted_fields": len(out.drifted_fields),
            "drifted": out.drifted_fields,
            "target": out.target_uri,
            "summary": out.summary,
        }
    if name == "label_queue":
        from rlops.pipeline_steps.labels.step import label_queue_run

        t0, c0 = time.perf_counter(), time.process_time()
        out = label_queue_run(ctx)
        return {
            "seconds": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0,
            "rows_read": out.rows_read,
            "items": out.items,
        }
    raise SystemExit(f"unknown measurement {name!r}")


# --------------------------------------------------------------------------- measurements (parent side)
def run_child(
    name: str, engine: str, args: argparse.Namespace, home: Path, limit_s: float | None, max_gb: float | None
) -> dict[str, Any]:
    """Run one measurement in a child process; its peak RSS from wait4, stopped past the limits."""
    log = Path(tempfile.mkstemp(prefix=f"trace-scale-{name}-{engine}-", suffix=".log")[1])
    cmd = [
        sys.executable,
        __file__,
        "--child",
        name,
        "--engine",
        engine,
        "--home",
        str(home),
        "--days",
        str(args.days),
        "--repeats",
        str(args.repeats),
        "--trace-id",
        args.trace_id,
        "--slice-hours",
        str(args.slice_hours),
        "--workers",
        str(args.workers),
        "--fan-hours",
        str(args.fan_hours),
    ]
    env = {**os.environ, "RLOPS_HOME": str(home), "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
    t0, why = time.perf_counter(), None
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss_gb = _rss_gb(proc.pid)
            if limit_s is not None and time.perf_counter() - t0 > limit_s:
                why = f"stopped after {limit_s:.0f} s"
            elif max_gb is not None and rss_gb > max_gb:
                why = f"stopped at {rss_gb:.1f} GB RSS (cap {max_gb} GB)"
            if why:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = log.read_text()
    log.unlink(missing_ok=True)
    res: dict[str, Any] = {
        "peak_rss_gb": round(usage.ru_maxrss / 2**20, 2),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    if why:
        return {**res, "finished": False, "why": why}
    last = text.strip().splitlines()[-1] if text.strip() else ""
    if proc.returncode != 0 or not last.startswith("{"):
        return {**res, "finished": False, "why": f"exit {proc.returncode}: {text.strip()[-600:]}"}
    return {**res, "finished": True, **json.loads(last)}


def _rss_gb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def verdict(duck: dict[str, dict[str, Any]]) -> dict[str, bool]:
    def ok(m: str, key: str, bar: float) -> bool:
        r = duck.get(m, {})
        return bool(r.get("finished")) and float(r.get(key, float("inf"))) < bar

    out = {
        "replay_s": ok("replay", "seconds", BARS["replay_s"]),
        "console_first_load_s": ok("console", "seconds", BARS["console_first_load_s"]),
        "console_page_p95_ms": ok("console", "page_p95_ms", BARS["console_page_p95_ms"]),
        "drift_day_s": ok("drift_day", "seconds", BARS["drift_day_s"]),
        "label_queue_s": ok("label_queue", "seconds", BARS["label_queue_s"]),
    }
    out["peak_rss_gb"] = all(float(r.get("peak_rss_gb", 99)) < BARS["peak_rss_gb"] for r in duck.values())
    one, fanned = duck.get("drift_window", duck.get("drift_day", {})), duck.get("drift_fanned", {})
    if "drift_fanned" in duck:  # the fan-out changes the wall clock, never a verdict
        out["drift_fanned_same_verdicts"] = bool(one.get("finished")) and one.get("drifted") == fanned.get("drifted")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rows", type=int, default=50_000_000)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=20, help="console: fetches of every page after the first load")
    ap.add_argument("--home", type=Path, default=None, help="a demo home to reuse (default: a new temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the tiled store afterwards")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="with --home: reuse the store an earlier run left there with the same --rows and --days (implies --keep)",
    )
    ap.add_argument("--no-pandas", action="store_true", help="measure the DuckDB path only")
    ap.add_argument("--measures", default=",".join(MEASURES), help=f"comma-separated subset of {','.join(MEASURES)}")
    ap.add_argument("--pandas-timeout", type=float, default=300.0, help="seconds a pandas measurement may take")
    ap.add_argument("--pandas-max-gb", type=float, default=8.0, help="RSS at which a pandas measurement is stopped")
    ap.add_argument("--slice-hours", type=float, default=6.0, help="drift_fanned: hours of the window per mapped task")
    ap.add_argument("--workers", type=int, default=2, help="drift_fanned: worker processes running the mapped tasks")
    ap.add_argument("--fan-hours", type=float, default=24.0, help="drift_fanned: hours of the window it fans out")
    ap.add_argument("--child", choices=(*MEASURES, "baseline", "drift_window"), help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="duckdb", help=argparse.SUPPRESS)
    ap.add_argument("--trace-id", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(
            json.dumps(
                measure(
                    args.child,
                    args.engine,
                    args.home,
                    args.days,
                    args.repeats,
                    args.trace_id,
                    (args.slice_hours, args.workers, args.fan_hours),
                ),
                default=str,
            )
        )
        return 0
    if args.days < 2:
        raise SystemExit("--days must be at least 2 (the replay id is on the middle day, drift reads the last)")
    load_start = loadavg()
    print(f"load average at start: {' '.join(map(str, load_start))}", flush=True)
    home = (args.home or Path(tempfile.mkdtemp(prefix="rlops-trace-scale-"))).resolve()
    t0 = time.perf_counter()
    _console_bench().ensure_demo(home)
    print(f"demo home ready: {home} ({time.perf_counter() - t0:.0f}s)", flush=True)
    store = reused_store(home, args.rows, args.days) if args.reuse else None
    if store is None:
        store = build_store(home, args.rows, args.days)
        (home / "rlops-data" / STORE_DIR / STORE_INFO).write_text(json.dumps(store))
    else:
        print("store: reused (built by an earlier --keep run)", flush=True)
    args.trace_id = store["trace_id"]
    print(
        f"store: {store['rows']:,} rows in {store['files']} hourly partitions, {store['gib']} GiB, "
        f"built in {store['build_s']}s",
        flush=True,
    )
    print(
        subprocess.run(["df", "-h", str(home)], capture_output=True, text=True, check=False).stdout.strip(), flush=True
    )
    results: dict[str, dict[str, Any]] = {"duckdb": {}, "pandas": {}}
    try:
        warm = run_child("baseline", "duckdb", args, home, None, None)
        print(f"sandbox baseline (outside the timings): {warm.get('seconds', warm.get('why'))}", flush=True)
        for engine in ("duckdb", *(() if args.no_pandas else ("pandas",))):
            for name in [m for m in MEASURES if m in args.measures.split(",")]:
                if name == "drift_fanned" and engine != "duckdb":
                    continue
                if name == "drift_fanned" and args.fan_hours != 24:  # one task over the same window first
                    results[engine]["drift_window"] = r = run_child("drift_window", engine, args, home, None, None)
                    print(f"{engine:6} drift_window {json.dumps(r, default=str)[:600]}", flush=True)
                limit = (args.pandas_timeout, args.pandas_max_gb) if engine == "pandas" else (None, None)
                r = run_child(name, engine, args, home, *limit)
                results[engine][name] = r
                shown = {k: v for k, v in r.items() if k != "pages"}
                print(f"{engine:6} {name:12} {json.dumps(shown, default=str)}", flush=True)
    finally:
        if not (args.keep or args.reuse):
            shutil.rmtree(home / "rlops-data" / STORE_DIR, ignore_errors=True)
    passed = verdict(results["duckdb"])
    load_end = loadavg()
    print(f"load average at end: {' '.join(map(str, load_end))}", flush=True)

    def ratio(m: str) -> float | None:
        d, p = results["duckdb"].get(m, {}), results["pandas"].get(m, {})
        return round(p["seconds"] / d["seconds"], 1) if d.get("finished") and p.get("finished") else None

    print(
        json.dumps(
            {
                "bench": "trace_scale",
                **store,
                "days": args.days,
                "bars": BARS,
                "passed": passed,
                "all_passed": all(passed.values()),
                "duckdb": results["duckdb"],
                "pandas": results["pandas"],
                "pandas_over_duckdb": {m: ratio(m) for m in MEASURES},
                "loadavg_start": load_start,
                "loadavg_end": load_end,
                "cpus": os.cpu_count(),
            },
            default=str,
        )
    )
    return 0 if all(passed.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
