"""The machine's load average, printed by every benchmark at its start and end: a figure measured
on a busy machine is not comparable with one measured on an idle one."""

from __future__ import annotations

import os


def load_average() -> list[float]:
    """1-, 5- and 15-minute load averages (empty where the platform has none)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def report(when: str) -> list[float]:
    """Print ``load average at <when>: [...]`` and return the figures."""
    load = load_average()
    print(f"load average at {when}: {load}; {os.cpu_count()} CPUs", flush=True)
    return load
