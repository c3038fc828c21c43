"""What an outcome import or capture is asked to do: the options of ``rlops outcome import`` and
``rlops outcome capture``, declared once (see :mod:`rlops.common.step_request`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.common.step_request import option


@dataclass(frozen=True)
class OutcomeImportRequest:
    """One import of a file of outcomes."""

    path: str = option(
        required=True, help="the outcomes: a .jsonl (.jsonl.gz, .ndjson), .csv (.csv.gz) or .parquet file (path or URI)"
    )


@dataclass(frozen=True)
class OutcomeCaptureRequest:
    """One capture of the outcome lines landed in the run key's interval (the interval is its only input)."""


__all__ = ["OutcomeCaptureRequest", "OutcomeImportRequest"]
