"""When to draw a progress bar, and where library chatter goes when no one watches a terminal.

A bar helps a person watching a terminal; it is noise in machine-read output (``--json``), in a
file or pipe, and in Airflow task logs (where each redraw becomes a log line). Worse, Airflow's
task runner logs everything a task writes to stderr at ERROR: a bar, or MLflow's INFO lines from
its own stderr handler, would read as errors there. So bars draw only on a terminal, and outside
one MLflow's loggers go through logging, where a record keeps its level.

This base module imports no library of a layer above it: the layer that uses a library names the
stream that library's own handlers write to (:func:`register_library_stream`; ``rlops.registry``
names MLflow's when it is imported).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

#: Loggers whose INFO lines are bookkeeping of the library itself, with the level they keep in a
#: task log: Great Expectations logs one "Skipping registering function …" line per public-API
#: closure at every import (over 200 lines, the bulk of a drift or capture task's log).
QUIET_LOGGERS = {"great_expectations._docs_decorators": logging.WARNING}

AIRFLOW_ENV = "AIRFLOW_CTX_DAG_ID"
"""Set by Airflow in the environment of every running task."""

_library_streams: list[Callable[[], object]] = []
_routed = False  # route_library_output took the handlers off: a stream registered later is at once


def show_progress(as_json: bool = False, stream: TextIO | None = None) -> bool:
    """True when a progress bar should be drawn: not ``--json``, the bar's stream (stderr) is a
    terminal, and the process is not an Airflow task."""
    if as_json or os.environ.get(AIRFLOW_ENV):
        return False
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(enabled: bool, **kwargs: Any) -> tqdm[Any]:
    """A tqdm bar on stderr (or ``file=``) that draws only when ``enabled`` and
    :func:`show_progress` agrees: a caller that asks for a bar inside an Airflow task or with its
    stderr in a pipe gets one that writes nothing (``update``/``close`` still work)."""
    from tqdm.auto import tqdm

    stream = kwargs.pop("file", None) or sys.stderr
    return tqdm(file=stream, disable=not (enabled and show_progress(stream=stream)), **kwargs)


def register_library_stream(stream_of: Callable[[], object]) -> None:
    """Have :func:`route_library_output` take off the loggers' handlers that write to the stream
    ``stream_of`` returns (a library's own stderr stream; calling it imports the library, which
    installs its handlers). Registered after the output was routed, it is routed at once."""
    if stream_of in _library_streams:
        return
    _library_streams.append(stream_of)
    if _routed:
        _release_handlers(stream_of())


def route_library_output() -> None:
    """Outside a terminal (an Airflow task, a pipe), with logging configured (Airflow's task runner
    does), MLflow's loggers lose their own stderr handler and propagate, so their records reach the
    task log at their own level; MLflow's artifact progress bars are turned off. Idempotent;
    nothing changes for a person at a terminal, nor where no logging is configured (MLflow's
    handler is then the only place its warnings show)."""
    global _routed
    if show_progress():
        return
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # "View run/experiment at: <url>" after every run: the run is one click away in the console
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    for name, level in QUIET_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    if not logging.getLogger().handlers:
        return
    _routed = True
    for stream_of in _library_streams:
        _release_handlers(stream_of())


def _release_handlers(stream: object) -> None:
    """Loggers with a handler writing to ``stream`` lose it and propagate (the library's handlers
    are installed by its import, which ``stream``'s lookup made: they are taken off whatever was
    first)."""
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if not isinstance(logger, logging.Logger):
            continue  # a placeholder of a dotted name no one asked for yet
        own = [h for h in logger.handlers if getattr(h, "stream", None) is stream]
        if own:
            for handler in own:
                logger.removeHandler(handler)
            logger.propagate = True
