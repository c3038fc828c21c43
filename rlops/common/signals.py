"""A terminated command unwinds like an interrupted one, so what it opened is closed.

Python turns SIGINT into :class:`KeyboardInterrupt`, but SIGTERM (``kill``, a container stop, a
scheduler's timeout) ends the process on the spot: every MLflow run it had open stays ``RUNNING``
for ever, every lock file stays written. Inside :func:`signals_unwind` SIGTERM raises
:class:`Terminated` (a ``KeyboardInterrupt``) in the main thread instead, so each ``with`` block
on the way out closes what it opened — an MLflow run ends as ``KILLED``
(:meth:`rlops.registry.client.Tracker.start_run`). A second signal while the first
one unwinds is ignored: the cleanup is what it would cut short.

SIGKILL cannot be caught; the runs of a killed process are closed by the next run of the same
step (:func:`rlops.pipeline_steps.infra.pass_run.close_runs_of_dead_processes`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports it
EXIT_TERMINATED = 143  # 128 + SIGTERM


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM; raised where it was, to unwind it."""


@contextmanager
def signals_unwind() -> Iterator[None]:
    """SIGTERM and SIGINT raise in the main thread while the block runs (see the module doc);
    outside the main thread, where Python cannot install handlers, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    unwinding = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal unwinding
        if unwinding:  # already on the way out: let the cleanup finish
            return
        unwinding = True
        if signum == signal.SIGTERM:
            raise Terminated(f"terminated by signal {signal.Signals(signum).name}")
        raise KeyboardInterrupt

    before = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def exit_code(exc: KeyboardInterrupt) -> int:
    """The shell's exit status for an interrupted (130) or terminated (143) command."""
    return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
