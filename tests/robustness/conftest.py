"""The robustness suite's bookkeeping: every probe is its own parametrised test (ids name the
probe), each outcome is classified — clean, traceback, hang, silent accept, silent loss, security
finding — and the classification of the whole run is printed at the end of the session."""

from __future__ import annotations

from collections import Counter
from pathlib import Path, PurePosixPath

import pytest

from .io_harness import BAD, OUTCOMES, RESULTS


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project home of its own: storage, MLflow, artifacts and the label queue under ``tmp_path``."""
    monkeypatch.setenv("RLOPS_STORAGE_ROOT", f"file://{tmp_path / 'store'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("RLOPS_ARTIFACT_ROOT", str(tmp_path / "artifacts"))
    monkeypatch.setenv("RLOPS_QUEUE_DB", f"sqlite:///{tmp_path / 'queue.db'}")
    return tmp_path


#: Probes run per surface (the test module: ``test_probes_sql.py`` is ``sql``; the command-line
#: probes of ``probes_*.py`` by their module's prefix), printed at the end of the session.
SURFACES: Counter[str] = Counter()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path, _, name = report.nodeid.partition("::")
    if report.when != "call" or "robustness/" not in path or "[" not in name:
        return
    surface = PurePosixPath(path).stem.removeprefix("test_probes_").removeprefix("test_")
    if surface == "robustness":  # the command-line probes: pack_…, args_…
        surface = "command-" + name.partition("[")[2].split("_")[0]
    SURFACES[surface] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SURFACES:
        terminalreporter.write_line(
            f"robustness probes per surface ({sum(SURFACES.values())}): "
            + ", ".join(f"{k} {v}" for k, v in sorted(SURFACES.items()))
        )
    if not RESULTS:
        return
    c = Counter(kind for _, kind, _ in RESULTS)
    slowest = max(RESULTS, key=lambda r: r[2])
    names = {
        "clean": "clean",
        "traceback": "tracebacks",
        "hang": "hangs",
        "accepted": "silent accepts",
        "lost": "silent losses",
        "security": "security findings",
    }
    terminalreporter.write_line(
        f"robustness: {len(RESULTS)} probes — "
        + ", ".join(f"{names[k]} {c.get(k, 0)}" for k in OUTCOMES)
        + f" (slowest {slowest[0]}: {slowest[2]:.1f} s)"
    )
    bad = [r for r in RESULTS if r[1] in BAD]
    for probe_id, kind, _ in bad:
        terminalreporter.write_line(f"  {kind}: {probe_id}")
