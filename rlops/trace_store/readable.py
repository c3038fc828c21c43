"""Which files of the trace store can be read as parquet at all.

A zero-byte file a crashed writer left, a file copied in half, a stray file named ``*.parquet``:
DuckDB refuses the whole scan over one such file, so a single bad file in an hour no one asks
about would fail every read of the store. :func:`readable_files` keeps the files whose parquet
footer reads, and names each other one in a warning (once per version of the file), so the rest of
the store is served and the bad file is found in the log. A file asked for by name is an error
instead, naming it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from rlops.common.errors import UserError

log = logging.getLogger(__name__)

#: (size, mtime_ns, problem or None) of each local file already checked: a footer is read once per
#: version of a file, not once per query.
_CHECKED: dict[str, tuple[int, int, str | None]] = {}
_LOCK = threading.Lock()
_MAX_CHECKED = 200_000


def parquet_problem(path: str) -> str | None:
    """Why the local file ``path`` cannot be read as parquet (None when its footer reads)."""
    return _check(path)[1]


def _check(path: str) -> tuple[bool, str | None]:
    """``(first seen, problem)``: whether this version of the file was not checked before, and
    why it cannot be read (None when its footer reads)."""
    import pyarrow.parquet as pq

    try:
        st = os.stat(path)
    except OSError as exc:
        return True, f"cannot be read ({exc.strerror or exc})"
    key = (st.st_size, st.st_mtime_ns)
    with _LOCK:
        hit = _CHECKED.get(path)
    if hit is not None and hit[:2] == key:
        return False, hit[2]
    problem: str | None
    if st.st_size < 12:  # the magic bytes at both ends and the footer's length
        problem = f"{st.st_size} bytes, too small to be a parquet file"
    else:
        try:
            pq.read_metadata(path)
            problem = None
        except Exception as exc:  # noqa: BLE001 - any way a footer fails to read makes the file unreadable
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            problem = f"not a readable parquet file ({first[:200]})"
    with _LOCK:
        if len(_CHECKED) > _MAX_CHECKED:
            _CHECKED.clear()
        _CHECKED[path] = (*key, problem)
    return True, problem


def readable_files(files: Sequence[str], named: bool = False) -> list[str]:
    """``files`` (storage URIs) without the local ones that cannot be read as parquet, each named in
    a warning the first time it is seen. With ``named`` (the caller asked for these files by name,
    not for a folder) an unreadable file is a :class:`UserError` naming it instead. Object-store
    files are kept as they are: checking them would cost a request per file."""
    out = []
    for uri in files:
        if not uri.startswith("file://"):
            out.append(uri)
            continue
        path = uri[len("file://") :]
        first, problem = _check(path)
        if problem is None:
            out.append(uri)
        elif named:
            raise UserError(f"trace file {path}: {problem}; expected a parquet file of trace rows")
        elif first:
            log.warning("trace store: skipped %s: %s; the other files are read without it", path, problem)
    return out
