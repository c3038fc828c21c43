"""The query engines of the trace store: their configuration and the DuckDB database behind them.

* :class:`QueryEngineConfig` — the ``trace_store`` block of params.yaml (engine, threads, memory
  limit, spill folder);
* :func:`database` / :func:`cursor` — the in-memory DuckDB database of one configuration (one per
  process) and a cursor on it per query;
* :func:`source_schema` — the column types of a scan, bound once per process and set of files;
* :func:`glob_literal` — a local path as DuckDB's ``read_parquet`` reads it, never as a pattern;
* :func:`plain_types` — DuckDB's Arrow result in the types the parquet files hold;
* :func:`sample_buckets` — the stable sampling bucket of episode ids, as the SQL sample draws it.

The reads themselves live in :mod:`rlops.trace_store.query`.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlops.common.errors import UserError
from rlops.common.params_model import CaptureParams
from rlops.common.params_operations import memory_limit_problem
from rlops.common.params_sources import params_block

if TYPE_CHECKING:
    import duckdb
    import numpy as np
    import pyarrow as pa

    from rlops.common.params_model import CaptureParams, Params
    from rlops.common.params_operations import TraceStoreParams

ENGINES = ("duckdb", "pandas")
#: Episodes are sampled by a hash of their id into this many buckets.
SAMPLE_BUCKETS = 1_000_000
#: The sampling bucket of a row's episode, in DuckDB's SQL.
BUCKET_SQL = f"(hash(CAST(episode_id AS VARCHAR)) % {SAMPLE_BUCKETS})"


@dataclass(frozen=True)
class QueryEngineConfig:
    """How the trace store is read (the ``trace_store`` block of params.yaml)."""

    engine: str = "duckdb"
    """``duckdb`` (bounded memory, pushdown) or ``pandas`` (whole files in memory; the reference)."""
    threads: int = 0
    """DuckDB worker threads; 0 = the CPUs this process may use."""
    memory_limit: str = "1GB"
    """DuckDB's working memory (``512MB``, ``2GB``, ``50%``); past it, sorts and aggregates spill."""
    temp_directory: str = ""
    """Spill folder; empty = ``<system temp>/rlops-duckdb``."""

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"trace_store.engine is {self.engine!r}; expected one of {list(ENGINES)}")
        if int(self.threads) < 0:
            raise ValueError(f"trace_store.threads is {self.threads}; expected 0 (every CPU) or a positive count")
        problem = memory_limit_problem(self.memory_limit)
        if problem is not None:  # "0GB" would pass to DuckDB and fail every query with out-of-memory
            raise UserError(f"trace_store.memory_limit {problem}")

    @classmethod
    def from_params(cls, params: Params | TraceStoreParams | CaptureParams | Mapping[str, Any]) -> QueryEngineConfig:
        """From the typed ``trace_store`` block, the params document holding it, or a raw params
        mapping (validated by the params model)."""
        if isinstance(params, CaptureParams):  # a capture block alone carries no engine settings
            return cls()
        cfg = params_block(params, "trace_store")
        return cls(
            engine=cfg.engine,
            threads=cfg.threads,
            memory_limit=cfg.memory_limit,
            temp_directory=cfg.temp_directory or "",
        )

    def with_engine(self, engine: str) -> QueryEngineConfig:
        return QueryEngineConfig(engine, self.threads, self.memory_limit, self.temp_directory)


_DATABASES: dict[QueryEngineConfig, duckdb.DuckDBPyConnection] = {}
_SCHEMAS: dict[tuple[str, tuple[tuple[int, int], ...]], dict[str, str]] = {}
_LOCAL_FILE = re.compile(r"'((?:[^']|'')+)'")
_DB_LOCK = threading.Lock()


def cursor(cfg: QueryEngineConfig) -> duckdb.DuckDBPyConnection:
    """A cursor of :func:`database` for one query (no progress bar on the terminal)."""
    cur = database(cfg).cursor()
    cur.execute("SET enable_progress_bar = false")
    return cur


def database(cfg: QueryEngineConfig) -> duckdb.DuckDBPyConnection:
    """The in-memory DuckDB database of one engine configuration (one per process, created on first
    use; every query runs on its own cursor, so threads may query at once). The parquet metadata
    cache keeps footers and bloom filters of files already opened."""
    import duckdb

    with _DB_LOCK:
        db = _DATABASES.get(cfg)
        if db is None:
            temp = cfg.temp_directory or os.path.join(tempfile.gettempdir(), "rlops-duckdb")
            config: dict[str, Any] = {
                "memory_limit": cfg.memory_limit,
                "temp_directory": temp,
                "preserve_insertion_order": True,
            }
            if cfg.threads:
                config["threads"] = int(cfg.threads)
            db = duckdb.connect(":memory:", config=config)
            db.execute("LOAD parquet")  # built in; loaded first so its settings exist
            db.execute("SET GLOBAL parquet_metadata_cache = true")  # GLOBAL: every cursor shares it
            _DATABASES[cfg] = db
        return db


def sample_buckets(episode_ids: Sequence[str]) -> np.ndarray:
    """The sampling bucket (0 … 999 999) of each episode id: DuckDB's ``hash`` of the id (stable
    for the pinned DuckDB version, and a tenth of the cost of MD5 over tens of millions of rows),
    computed here for the pandas engine exactly as :meth:`~rlops.trace_store.query.TraceReader.sample_episodes`
    does in SQL."""
    import numpy as np
    import pyarrow as pa

    ids = pa.table({"episode_id": pa.array([str(e) for e in episode_ids], pa.string())})
    cur = cursor(QueryEngineConfig(threads=1, memory_limit="256MB"))
    try:
        cur.register("_ids", ids)
        got = cur.sql(f"SELECT {BUCKET_SQL} AS b FROM _ids").to_arrow_table()
    finally:
        cur.close()
    out: np.ndarray = got.column("b").to_numpy().astype(np.int64)
    return out


def source_schema(cur: Any, source: str) -> dict[str, str]:
    """Column → DuckDB type of ``source``. Binding it reads every file's footer to unify the
    schemas, so it is done once per process and set of files (local files keyed by size and
    modification time too, so a rewritten partition is bound again)."""
    key = (source, _stat_key(source))
    with _DB_LOCK:
        hit = _SCHEMAS.get(key)
    if hit is None:
        hit = dict(cur.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {source})").fetchall())
        with _DB_LOCK:
            if len(_SCHEMAS) > 256:
                _SCHEMAS.clear()
            _SCHEMAS[key] = hit
    return hit


def _stat_key(source: str) -> tuple[tuple[int, int], ...]:
    """(size, mtime) of the local files a ``read_parquet`` source names (empty for a registered
    S3 dataset, whose name already digests its object keys)."""
    if not source.startswith("read_parquet("):
        return ()
    out = []
    for path in _LOCAL_FILE.findall(source):
        try:
            st = os.stat(_GLOB_ESCAPED.sub(r"\1", path.replace("''", "'")))
            out.append((st.st_size, st.st_mtime_ns))
        except OSError:
            out.append((-1, -1))
    return tuple(out)


#: What DuckDB's ``read_parquet`` takes as a pattern in a path; each is matched literally as the
#: one-character class ``[c]`` (DuckDB's globs have no backslash escape).
_GLOB_CHARS = frozenset("*?[")
_GLOB_ESCAPED = re.compile(r"\[([*?\[])\]")


def glob_literal(path: str) -> str:
    """``path`` as a DuckDB ``read_parquet`` path that names that one file: a storage root, a pack
    or a file whose name holds ``*``, ``?`` or ``[`` is never read as a pattern matching others."""
    return "".join(f"[{c}]" if c in _GLOB_CHARS else c for c in path)


def plain_types(table: pa.Table) -> pa.Table:
    """DuckDB's Arrow types as the parquet files hold them, so both engines hand pandas the same
    frame: string views / large strings as strings, the ``Etc/UTC`` zone DuckDB names as ``UTC``."""
    import pyarrow as pa

    def plain(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_timestamp(t) and t.tz == "Etc/UTC":
            return pa.timestamp(t.unit, tz="UTC")
        return t

    target = pa.schema(
        [pa.field(f.name, plain(f.type), f.nullable) for f in table.schema], metadata=table.schema.metadata
    )
    return table if target.equals(table.schema) else table.cast(target)
