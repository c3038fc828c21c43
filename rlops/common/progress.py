"""When to draw a progress bar: one decision for every long-running command.

A bar helps a person watching a terminal; it is noise in machine-read output (``--json``), in a
file or pipe, and in Airflow task logs (where each redraw becomes a log line).
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

AIRFLOW_ENV = "AIRFLOW_CTX_DAG_ID"
"""Set by Airflow in the environment of every running task."""


def show_progress(as_json: bool = False, stream: TextIO | None = None) -> bool:
    """True when a progress bar should be drawn: not ``--json``, the bar's stream (stderr) is a
    terminal, and the process is not an Airflow task."""
    if as_json or os.environ.get(AIRFLOW_ENV):
        return False
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
