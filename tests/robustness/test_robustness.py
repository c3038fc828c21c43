"""Every probe of ``probes_*.py`` through the real command line, one test per probe: no
tracebacks, no hangs, no bad value accepted, nothing lost, no secret shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import Probe, all_probes, run_probe
from .io_harness import check, ids

PROBES = all_probes()


def test_probe_ids_are_unique() -> None:
    names = [p.id for p in PROBES]
    assert len(set(names)) == len(names), sorted(i for i in names if names.count(i) > 1)


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_command_probe(probe: Probe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))
