"""Run bad inputs through the ``rlops`` command line and classify what happens.

A :class:`Probe` is one command line, run after an optional ``setup`` that writes its inputs into a
scratch folder: in this process through ``rlops.cli.main`` under an alarm (what a user sees, without
paying the interpreter's start-up per probe), or, with ``isolated``, in a fresh subprocess
(``python -m rlops.cli ...``) killed with its process group at the timeout — for inputs that burn
CPU inside C code or memory, which an alarm cannot interrupt. Its outcome is

* ``clean``     — the expected outcome: for a bad input exit code 2 and exactly one line on
  stderr, ``error: ...``, naming what the probe says it must name; for a control probe exit 0;
* ``traceback`` — a Python traceback on stderr (or exit code 1 on bad input);
* ``hang``      — still running when the timeout ran out (the process group is killed);
* ``accepted``  — a bad input that exited 0, or an error line that does not say what and where
  (a required mention missing, more than one line);
* ``security``  — a forbidden text (a secret) shown in the output;
* ``lost``      — the probe's own ``check`` found data lost or damaged (an output file
  truncated, a file of the pack's code executed).

Probe lists live in ``probes_*.py`` modules of this folder, each exporting ``PROBES``; any new
module is picked up by :func:`all_probes`.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlops.common.config import REPO_ROOT

from .io_harness import OUTCOMES, ProbeTimeout, cli, deadline

REPO = REPO_ROOT

#: When a probe counts as hung. A real hang never ends; the margin over the 10 s a validation
#: takes on an idle machine keeps a busy CI runner from reporting false hangs. The time of
#: every probe is measured and the slowest is printed.
DEFAULT_TIMEOUT_S = float(os.environ.get("RLOPS_PROBE_TIMEOUT_S", "30"))


@dataclass(frozen=True)
class Probe:
    """One command line and what a correct program does with it.

    ``argv`` follows ``rlops``; ``{tmp}`` in an argument is replaced by the probe's scratch
    folder. ``mentions`` must all appear in the error line, ``forbid`` must not appear anywhere
    in the output. ``check(tmp)`` returns a description of lost data, or None.
    """

    id: str
    argv: tuple[str, ...]
    setup: Callable[[Path], None] | None = None
    mentions: tuple[str, ...] = ()
    forbid: tuple[str, ...] = ()
    expect_ok: bool = False
    check: Callable[[Path], str | None] | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: run in a subprocess (CPU or memory bombs an in-process alarm cannot stop)
    isolated: bool = False


@dataclass
class Outcome:
    probe: Probe
    kind: str
    seconds: float
    rc: int | None
    stderr: str
    detail: str = ""
    stdout: str = field(default="", repr=False)


def classify(probe: Probe, rc: int | None, out: str, err: str, lost: str | None) -> tuple[str, str]:
    """The outcome kind of a finished (or timed-out: ``rc`` None) run, with a reason."""
    if rc is None:
        return "hang", f"no answer within {probe.timeout_s:g} s"
    if "Traceback (most recent call last)" in err or "Traceback (most recent call last)" in out:
        return "traceback", err.strip().splitlines()[-1] if err.strip() else "traceback on stdout"
    if lost:
        return "lost", lost
    shown = [t for t in probe.forbid if t in out or t in err]
    if shown:
        return "security", f"output shows {shown[0]!r}"
    if probe.expect_ok:
        return ("clean", "") if rc == 0 else ("accepted", f"a valid input was refused (exit {rc}): {err.strip()}")
    if rc == 0:
        return "accepted", "exit code 0 on a bad input"
    if rc != 2:
        return "traceback", f"exit code {rc} (expected 2): {err.strip()[-200:]}"
    lines = err.strip().splitlines()
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return "accepted", f"expected one 'error: ...' line, got {len(lines)} line(s): {err.strip()[:300]!r}"
    missing = [m for m in probe.mentions if m not in lines[0]]
    if missing:
        return "accepted", f"the error does not mention {missing[0]!r}: {lines[0]}"
    return "clean", ""


def run_probe(probe: Probe, scratch: Path) -> Outcome:
    tmp = scratch / probe.id
    tmp.mkdir(parents=True, exist_ok=True)
    if probe.setup is not None:
        probe.setup(tmp)
    argv = [a.replace("{tmp}", str(tmp)) for a in probe.argv]
    if not probe.isolated:
        return _run_in_process(probe, tmp, argv)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlops.cli", *argv],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        out_b, err_b = proc.communicate(timeout=probe.timeout_s)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out_b, err_b = proc.communicate()
        rc = None
    seconds = time.monotonic() - t0
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything the command left running
    except (ProcessLookupError, PermissionError):
        pass
    out, err = out_b.decode("utf-8", "replace"), err_b.decode("utf-8", "replace")
    lost = probe.check(tmp) if probe.check is not None else None
    kind, detail = classify(probe, rc, out, err, lost)
    return Outcome(probe, kind, seconds, rc, err, detail, out)


def _run_in_process(probe: Probe, tmp: Path, argv: list[str]) -> Outcome:
    t0 = time.monotonic()
    here = os.getcwd()
    os.chdir(REPO)
    try:
        with deadline(probe.timeout_s):
            rc: int | None
            rc, out, err = cli(argv)
    except ProbeTimeout:
        rc, out, err = None, "", ""
    finally:
        os.chdir(here)
    seconds = time.monotonic() - t0
    lost = probe.check(tmp) if probe.check is not None else None
    kind, detail = classify(probe, rc, out, err, lost)
    return Outcome(probe, kind, seconds, rc, err, detail, out)


def counts(outcomes: list[Outcome]) -> dict[str, int]:
    return {k: sum(1 for o in outcomes if o.kind == k) for k in OUTCOMES}


def all_probes() -> list[Probe]:
    """Every probe of every ``probes_*.py`` module next to this file."""
    probes: list[Probe] = []
    for path in sorted(Path(__file__).parent.glob("probes_*.py")):
        module = importlib.import_module(f"{__package__}.{path.stem}")
        probes.extend(module.PROBES)
    return probes
