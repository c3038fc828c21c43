"""Every probe of ``probes_*.py`` through the real command line, in subprocesses under a
timeout: no tracebacks, no hangs, no bad value accepted, nothing lost. Prints the counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import BAD, Outcome, all_probes, counts, run_all

PROBES = all_probes()


def test_probe_ids_are_unique() -> None:
    ids = [p.id for p in PROBES]
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)


def test_every_probe_is_handled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outcomes = run_all(PROBES, tmp_path)
    c = counts(outcomes)
    slowest = max(outcomes, key=lambda o: o.seconds)
    with capsys.disabled():
        print(f"\nrobustness: {len(outcomes)} probes — clean {c['clean']}, tracebacks {c['traceback']}, "
              f"hangs {c['hang']}, silently accepted {c['accepted']}, silent losses {c['lost']} "
              f"(slowest {slowest.probe.id}: {slowest.seconds:.1f} s)")
    bad = [o for o in outcomes if o.kind in BAD]
    assert not bad, "\n".join(_describe(o) for o in bad)


def _describe(o: Outcome) -> str:
    return f"{o.probe.id}: {o.kind} ({o.detail}) after {o.seconds:.1f} s, exit {o.rc}"
