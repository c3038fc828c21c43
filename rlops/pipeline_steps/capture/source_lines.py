"""The rows a capture reads, whatever their source, and the chunks they are validated in.

Every source turns its input into :class:`SourceLine` items: the landing zone's JSON lines
(:func:`landing_lines`), an OTLP export or MLflow's trace store
(:mod:`rlops.pipeline_steps.capture.trace_sources`), an imported decision log
(:mod:`rlops.pipeline_steps.capture.history`). A :class:`CaptureSource` names such a stream;
:func:`chunked` groups it into the :class:`LineChunk` units that
:func:`rlops.pipeline_steps.capture.core.write_capture` validates and writes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd

from rlops.data_contracts.records import LINE_COLUMN, SOURCE_COLUMN
from rlops.data_contracts.validation import REASON_COLUMN
from rlops.storage.backend import Storage


@dataclass(frozen=True)
class SourceLine:
    """One input row of any source: the text of one record with where it came from, or, with
    ``reason`` set, an item the source could not turn into a record (its raw text is kept and
    quarantined with that reason, so it still counts as a row in)."""

    text: str
    source: str
    line_no: int
    reason: str | None = None


@dataclass
class LineChunk:
    """Up to ``chunk_rows`` rows, with the source and 1-based line number of each;
    ``rejected`` holds the items that are not even text to parse (a line that is not UTF-8, a
    span without a readable attribute list) as ``(text, source, line_no, reason)``."""

    index: int
    lines: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    line_nos: list[int] = field(default_factory=list)
    rejected: list[tuple[str, str, int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lines) + len(self.rejected)

    def add(self, item: SourceLine) -> None:
        if item.reason is None:
            self.lines.append(item.text)
            self.sources.append(item.source)
            self.line_nos.append(item.line_no)
        else:
            self.rejected.append((item.text, item.source, item.line_no, item.reason))

    def rejected_rows(self) -> pd.DataFrame:
        """The rejected items, shaped like :func:`parse_json_lines`'s unparseable rows."""
        return pd.DataFrame(
            {
                "raw": pd.Series([r[0] for r in self.rejected], dtype="str"),
                REASON_COLUMN: pd.Series([r[3] for r in self.rejected], dtype="str"),
                SOURCE_COLUMN: pd.Series([r[1] for r in self.rejected], dtype="str"),
                LINE_COLUMN: pd.Series([r[2] for r in self.rejected], dtype="int64"),
            }
        )


def chunked(items: Iterable[SourceLine], chunk_rows: int) -> Iterator[LineChunk]:
    """Group a stream of rows into chunks of ``chunk_rows`` (the unit validated and written)."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    chunk = LineChunk(0)
    for item in items:
        chunk.add(item)
        if len(chunk) >= chunk_rows:
            yield chunk
            chunk = LineChunk(chunk.index + 1)
    if len(chunk):
        yield chunk


def landing_lines(storage: Storage, files: Sequence[str]) -> Iterator[SourceLine]:
    """Stream the landing files line by line; blank lines are not rows."""
    for uri in files:
        # Read as latin-1 (every byte is a character) and decode each line as UTF-8 here, so
        # one bad byte quarantines its line instead of failing the whole file.
        with storage.open_stream(uri, encoding="latin-1", gzip=uri.lower().endswith(".gz")) as stream:
            for no, line in enumerate(stream, start=1):
                raw = line.rstrip("\r\n").encode("latin-1")
                if not raw.strip():
                    continue
                try:
                    yield SourceLine(raw.decode("utf-8"), uri, no)
                except UnicodeDecodeError:
                    yield SourceLine(raw.decode("utf-8", "replace"), uri, no, "encoding: line is not valid UTF-8")


def iter_line_chunks(storage: Storage, files: Sequence[str], chunk_rows: int) -> Iterator[LineChunk]:
    """Stream the landing files line by line, yielding chunks; blank lines are not rows."""
    return chunked(landing_lines(storage, files), chunk_rows)


@dataclass
class CaptureSource:
    """What one capture reads: a stream of rows and its name. ``files_read``/``files_skipped``
    are filled in by the landing zone; ``spans_skipped`` is counted by a trace reader as it is
    iterated (child spans of a decision, which are parts of a row, not rows)."""

    name: str
    items: Iterable[SourceLine]
    files_read: list[str] = field(default_factory=list)
    files_skipped: list[str] = field(default_factory=list)
    spans_skipped: int = 0

    @property
    def tag(self) -> str:
        """The suffix of this source's manifest and file names ("" for the landing zone)."""
        if self.name == LANDING_ZONE:
            return ""
        kind = self.name.split(":", 1)[0] or "source"
        return f"{kind}-{hashlib.sha256(self.name.encode('utf-8')).hexdigest()[:10]}"


LANDING_ZONE = "landing_zone"
