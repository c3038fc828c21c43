"""How many torch threads a training uses: ``train.threads`` (``auto`` or a count).

An OpenMP team of *n* threads waits at every parallel region for its slowest member. PPO on the
sandbox runs thousands of small tensor operations per iteration, so when the team's threads
share cores with other busy processes — the other tasks an Airflow worker runs at once — each
region waits for a descheduled thread: on 2 cores at load ~9, 2 threads trained ~15 times slower
than 1. ``auto`` therefore gives each task its share of the CPUs it may use:

* the CPUs this process may run on (``os.sched_getaffinity``), capped by the cgroup v2 CPU quota
  (``/sys/fs/cgroup/cpu.max``: a container limited to 2 CPUs on a 64-core host sees 64 cores);
* divided by the tasks the worker runs at once: ``AIRFLOW__CELERY__WORKER_CONCURRENCY`` (a Celery
  worker), else ``AIRFLOW__CORE__PARALLELISM`` (a LocalExecutor), else — inside an Airflow task —
  Airflow's configured value of the same (its defaults are 16 and 32), else 1 (a CLI run);
* never more than the process already has (a caller that lowered torch's count keeps it), never
  fewer than 1.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
"""The cgroup v2 CPU quota of this process's group: ``<quota> <period>`` or ``max <period>``."""

AUTO = "auto"


def cgroup_cpu_limit(path: Path = CPU_MAX) -> int | None:
    """Whole CPUs the cgroup quota allows (at least 1), or None without a quota or the file."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(1, math.floor(int(quota) / int(period)))
    except (ValueError, ZeroDivisionError):
        return None


def usable_cpus(cpu_max: Path = CPU_MAX, affinity: set[int] | None = None) -> int:
    """CPUs this process may use: its affinity set, capped by the cgroup quota."""
    if affinity is None:
        affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    cpus = max(1, len(affinity))
    limit = cgroup_cpu_limit(cpu_max)
    return min(cpus, limit) if limit is not None else cpus


def _positive_int(value: str | None) -> int | None:
    try:
        n = int(str(value).strip())
    except ValueError:
        return None
    return n if n >= 1 else None


def _airflow_configured_slots() -> int | None:
    """Airflow's configured concurrency of this worker (read inside a task process only)."""
    try:
        from airflow.configuration import conf

        if "celery" in conf.get("core", "executor", fallback="").lower():
            return _positive_int(conf.get("celery", "worker_concurrency", fallback=""))
        return _positive_int(conf.get("core", "parallelism", fallback=""))
    except Exception:  # noqa: BLE001 - no Airflow, or a config it cannot read: one task at a time
        return None


def worker_slots(environ: Mapping[str, str] | None = None) -> int:
    """How many tasks the worker this process belongs to runs at once (1 outside Airflow)."""
    env = os.environ if environ is None else environ
    for name in ("AIRFLOW__CELERY__WORKER_CONCURRENCY", "AIRFLOW__CORE__PARALLELISM"):
        n = _positive_int(env.get(name))
        if n is not None:
            return n
    # Airflow exports the task's context (AIRFLOW_CTX_DAG_ID, …) into the task process's env.
    if env.get("AIRFLOW_CTX_DAG_ID"):
        return _airflow_configured_slots() or 1
    return 1


def resolve_threads(
    setting: int | str,
    current: int | None = None,
    environ: Mapping[str, str] | None = None,
    cpu_max: Path = CPU_MAX,
    affinity: set[int] | None = None,
) -> int:
    """The torch thread count ``setting`` (``auto`` or a count ≥ 1) means for this process;
    ``current`` is torch's count now (read from torch when None)."""
    if str(setting) != AUTO:
        n = _positive_int(str(setting))
        if n is None:
            raise ValueError(f"threads {setting!r}: expected 'auto' or an integer >= 1")
        return n
    if current is None:
        import torch

        current = torch.get_num_threads()
    share = usable_cpus(cpu_max, affinity) // worker_slots(environ)
    return max(1, min(current, share))


def set_torch_threads(n: int) -> None:
    """Use ``n`` intra-op threads, and ``n`` inter-op threads where torch still allows it (only
    before the process's first inter-op work)."""
    import torch

    torch.set_num_threads(n)
    if torch.get_num_interop_threads() != n:
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:  # already started: the intra-op count is the one that matters here
            pass


__all__ = ["AUTO", "CPU_MAX", "cgroup_cpu_limit", "resolve_threads", "set_torch_threads", "usable_cpus", "worker_slots"]
