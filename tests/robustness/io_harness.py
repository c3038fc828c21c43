"""Run data and I/O probes in this process, each under a timeout, and classify what happens.

An :class:`IOProbe` is one bad input (a landing line, a label file, an argument, a fault of the
storage underneath) and a ``run(tmp)`` that feeds it to the code under test and checks the result.
``run`` returns None when rlops handled the input as it must, or ``(kind, why)`` with ``kind``
``"accepted"`` (a bad value went through, or an error did not say what and where), ``"lost"``
(rows in != rows accepted + rows quarantined, a line or file dropped without a word) or
``"security"`` (a secret shown, a file written outside where it belongs, code run that must not
be). Besides:

* ``traceback`` — an exception escaped that is not an :class:`~rlops.common.errors.RlopsError`, or a
  command printed a traceback / an ``internal error`` line for what is a user or storage error;
* ``hang``      — the probe did not finish within its timeout (SIGALRM interrupts it).

Command-line probes go through ``rlops.cli.main`` (the one place errors are rendered), with
stdout and stderr captured, so they see exactly what a user sees.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OUTCOMES = ("clean", "traceback", "hang", "accepted", "lost", "security")
BAD = ("traceback", "hang", "accepted", "lost", "security")
#: ``(probe id, kind, seconds)`` of every probe run in this session (printed by conftest.py).
RESULTS: list[tuple[str, str, float]] = []
DEFAULT_TIMEOUT_S = float(os.environ.get("RLOPS_PROBE_TIMEOUT_S", "60"))
Verdict = tuple[str, str] | None


@dataclass(frozen=True)
class IOProbe:
    id: str
    run: Callable[[Path], Verdict]
    timeout_s: float = DEFAULT_TIMEOUT_S


@dataclass
class Outcome:
    probe: IOProbe
    kind: str
    seconds: float
    detail: str = ""


class ProbeTimeout(BaseException):
    """Raised by the alarm: a BaseException so no ``except Exception`` in the code swallows it."""


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise ProbeTimeout()

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_probe(probe: IOProbe, scratch: Path) -> Outcome:
    from rlops.common.errors import RlopsError

    tmp = scratch / probe.id
    tmp.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        with deadline(probe.timeout_s):
            verdict = probe.run(tmp)
    except ProbeTimeout:
        return Outcome(probe, "hang", time.monotonic() - t0, f"no answer within {probe.timeout_s:g} s")
    except RlopsError as exc:  # an error rlops raised on purpose, where the probe expected none
        return Outcome(probe, "accepted", time.monotonic() - t0, f"unexpected {type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - this is what the probes look for
        tb = traceback.format_exception(exc)
        return Outcome(
            probe,
            "traceback",
            time.monotonic() - t0,
            f"{type(exc).__name__}: {exc} at {tb[-2].strip() if len(tb) > 1 else ''}"[:400],
        )
    seconds = time.monotonic() - t0
    if verdict is None:
        return Outcome(probe, "clean", seconds)
    return Outcome(probe, verdict[0], seconds, verdict[1])


def run_all(probes: Sequence[IOProbe], scratch: Path) -> list[Outcome]:
    return [run_probe(p, scratch) for p in probes]


def check(outcome: Any) -> None:
    """Record one probe's outcome for the session's classification, and fail its test when bad."""
    RESULTS.append((outcome.probe.id, outcome.kind, outcome.seconds))
    assert outcome.kind not in BAD, (
        f"{outcome.probe.id}: {outcome.kind} ({outcome.detail}) after {outcome.seconds:.1f} s"
    )


def ids(probes: Sequence[Any]) -> list[str]:
    return [p.id for p in probes]


def counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return {k: sum(1 for o in outcomes if o.kind == k) for k in OUTCOMES}


def report(name: str, outcomes: Sequence[Outcome]) -> str:
    c = counts(outcomes)
    slowest = max(outcomes, key=lambda o: o.seconds)
    return (
        f"\n{name}: {len(outcomes)} probes — clean {c['clean']}, tracebacks {c['traceback']}, "
        f"hangs {c['hang']}, silently accepted {c['accepted']}, silent losses {c['lost']} "
        f"(slowest {slowest.probe.id}: {slowest.seconds:.1f} s)"
    )


def failures(outcomes: Sequence[Outcome]) -> str:
    return "\n".join(f"{o.probe.id}: {o.kind} ({o.detail}) after {o.seconds:.1f} s" for o in outcomes if o.kind in BAD)


# --------------------------------------------------------------------------- expectations


def expect_error(fn: Callable[[], Any], exit_code: int, mentions: Sequence[str] = ()) -> Verdict:
    """``fn()`` must raise an :class:`RlopsError` with ``exit_code`` whose message mentions every
    one of ``mentions``; any other exception propagates (a traceback), a return is "accepted"."""
    from rlops.common.errors import RlopsError

    try:
        got = fn()
    except RlopsError as exc:
        if int(exc.exit_code) != exit_code:
            return "accepted", f"{type(exc).__name__} exits {int(exc.exit_code)}, expected {exit_code}: {exc}"
        missing = [m for m in mentions if m not in str(exc)]
        return ("accepted", f"the error does not mention {missing[0]!r}: {exc}") if missing else None
    return "accepted", f"no error; returned {str(got)[:200]}"


def cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """``rlops <argv>`` in this process: (exit code, stdout, stderr)."""
    from rlops.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:  # argparse
            rc = exc.code if isinstance(exc.code, int) else 2
    return int(rc), out.getvalue(), err.getvalue()


_INFO = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} INFO (mlflow|alembic)[\w.]*: ")


def expect_cli_error(argv: Sequence[str], exit_code: int = 2, mentions: Sequence[str] = ()) -> Verdict:
    """The command must exit ``exit_code`` with one error line (argparse: its usage line plus one
    error line) naming every one of ``mentions`` — never a traceback or an ``internal error``."""
    rc, out, err = cli(argv)
    if "Traceback (most recent call last)" in out + err or "internal error" in err:
        return "traceback", err.strip().splitlines()[-1] if err.strip() else "traceback"
    if rc == 0:
        return "accepted", f"exit 0 on a bad input: {out.strip()[:200]}"
    # MLflow's own INFO lines when it creates a fresh tracking database are not rlops' words.
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("usage:", " ")) and not _INFO.match(ln)]
    if rc != exit_code:
        return "accepted", f"exit {rc}, expected {exit_code}: {err.strip()[:300]}"
    if len(lines) != 1:
        return "accepted", f"expected one error line, got {len(lines)}: {err.strip()[:300]!r}"
    missing = [m for m in mentions if m not in lines[0]]
    return ("accepted", f"the error does not mention {missing[0]!r}: {lines[0]}") if missing else None
