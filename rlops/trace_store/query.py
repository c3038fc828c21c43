"""Every read of the trace store: DuckDB over the partitioned parquet. One home.

The layout and the writes live in :mod:`rlops.trace_store.store`; this module
answers the questions the steps, the CLI and the console ask of it, in bounded memory:

* which files: the ``scenario=/date=/hour=`` partitions overlapping a time window (partition
  pruning on the hive keys; ``quarantine`` partitions never count);
* :meth:`TraceReader.read` — rows of a window, only the ``columns`` asked for, optionally only rows
  whose columns equal given values (predicate and projection pushdown into the parquet scan; the
  files' bloom filters on ``trace_id`` / ``episode_id`` skip every row group without the id);
* :meth:`TraceReader.episode_rows` — the episode(s) holding a trace id (replay, audit, console);
* :meth:`TraceReader.count_by`, :meth:`TraceReader.sample_episodes`, :meth:`TraceReader.batches`
  and :meth:`TraceReader.query` (SQL over a ``traces`` view) for aggregates, sampled whole
  episodes, out-of-core streaming (off-policy evaluation over a week) and ad-hoc questions.

Engines (``trace_store.engine`` in params.yaml; their settings and DuckDB database in
:mod:`rlops.trace_store.engine`): ``duckdb`` (the default: threads, memory limit and spill folder
from params; sorts and aggregations past the limit spill to disk) or ``pandas`` (every matching
file read whole with pyarrow and filtered in memory, :mod:`rlops.trace_store.pandas_engine`: the
reference the tests compare with, and what the benchmark measures beside DuckDB). Both return the
same frame: the same rows in the same order (files in path order, rows in file order), the same
columns and dtypes.

Local folders are scanned by DuckDB's own parquet reader, each file named by a path escaped for it
(:func:`~rlops.trace_store.engine.glob_literal`): ``*``, ``?`` and ``[`` in a storage root, a
partition or a file name never match another file. S3 objects (``s3://``) are read through the
project's storage settings (endpoint, credentials as boto3 resolves them) as a pyarrow dataset
that DuckDB scans with the same projection and filter pushdown: DuckDB's ``httpfs`` extension is
downloaded at run time, and a deployment without network access to DuckDB's extension site cannot
rely on it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.trace_store.engine import (
    BUCKET_SQL,
    SAMPLE_BUCKETS,
    QueryEngineConfig,
    cursor,
    glob_literal,
    plain_types,
    sample_buckets,
    source_schema,
)
from rlops.trace_store.pandas_engine import pandas_frame
from rlops.trace_store.readable import readable_files
from rlops.trace_store.time_partitions import partition_overlaps

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

    from rlops.storage.backend import Storage

_EXCLUDED = ("/quarantine/",)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class TraceReader:
    """Reads of one trace store's parquet (any ``file://`` or ``s3://`` folder or file under it).

    ``uri`` arguments are a scenario folder (``TraceStore.scenario_uri``), any folder of trace
    partitions, or one parquet file; ``window`` is ``(start, end)`` in UTC, rows kept when
    ``start <= ts < end``; ``where`` maps column → value (or a list of values) rows must equal."""

    def __init__(self, storage: Storage, config: QueryEngineConfig | None = None) -> None:
        self.storage = storage
        self.config = config or QueryEngineConfig()

    @property
    def engine(self) -> str:
        return self.config.engine

    # ------------------------------------------------------------------ files
    def files(self, uri: str, window: tuple[datetime, datetime] | None = None) -> list[str]:
        """The parquet files under ``uri`` (sorted; quarantine excluded) whose date/hour partition
        overlaps ``window``."""
        named = uri.endswith(".parquet") and self.storage.exists(uri)
        if named:
            files = [uri]
        else:
            files = [f for f in self.storage.list(uri, suffix=".parquet") if not any(x in f for x in _EXCLUDED)]
        # a plain local path (``--traces ./x.parquet``) is a file:// URI like every other local file
        files = [f if "://" in f else f"file://{Path(f).resolve()}" for f in files]
        # one unreadable file fails a whole DuckDB scan: it is left out with a warning naming it
        return readable_files([f for f in files if window is None or partition_overlaps(f, window)], named)

    def columns(self, uri: str) -> list[str]:
        """Column names of the store under ``uri`` (the union over its files, first seen first)."""
        files = self.files(uri)
        if not files:
            return []
        if self.engine == "pandas":
            import pyarrow.parquet as pq

            seen: dict[str, None] = {}
            for f in files:
                with self.storage.local_path(f) as path:
                    seen.update(dict.fromkeys(pq.read_schema(path).names))
            return list(seen)
        with self._scan(files) as (cur, source):
            return [d[0] for d in cur.execute(f"SELECT * FROM {source} LIMIT 0").description]

    # ------------------------------------------------------------------ rows
    def read(
        self,
        uri: str,
        window: tuple[datetime, datetime] | None = None,
        columns: Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        categorical: bool = False,
    ) -> pd.DataFrame:
        """Rows under ``uri`` in ``window`` matching ``where``: only ``columns`` (the ones the store
        has), in file order. An empty frame when nothing matches. ``categorical``: text columns as
        pandas categoricals, built in Arrow (a day of ids and enum values without a Python string
        per value: a fraction of the memory)."""
        return self._frame(self.files(uri, window), window, columns, where, categorical)

    def batches(
        self,
        uri: str,
        window: tuple[datetime, datetime] | None = None,
        columns: Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        batch_rows: int = 1_000_000,
        categorical: bool = False,
    ) -> Iterator[pd.DataFrame]:
        """:meth:`read` in frames of at most ``batch_rows`` rows, one at a time (a week of traffic
        in the memory of one batch); ``categorical`` as in :meth:`read`, per frame."""
        import pyarrow as pa

        files = self.files(uri, window)
        if not files:
            return
        if self.engine == "pandas":
            for f in files:
                df = self._frame([f], window, columns, where, categorical)
                for i in range(0, len(df), batch_rows):
                    yield df.iloc[i : i + batch_rows].reset_index(drop=True)
            return
        with self._scan(files) as (cur, source):
            sql, args = self._select(cur, source, window, columns, where)
            reader = cur.sql(sql, params=args).to_arrow_reader(batch_rows)
            # DuckDB hands over vectors of a few thousand rows: gathered into frames of batch_rows
            # (one conversion to pandas per frame, not per vector)
            pending: list[pa.RecordBatch] = []
            held = 0
            for batch in reader:
                pending.append(batch)
                held += batch.num_rows
                while held >= batch_rows:
                    table = pa.Table.from_batches(pending)
                    yield self._to_pandas(table.slice(0, batch_rows), files, categorical)
                    rest = table.slice(batch_rows)
                    pending, held = rest.to_batches(), rest.num_rows
            if held:
                yield self._to_pandas(pa.Table.from_batches(pending), files, categorical)

    def episode_rows(self, uri: str, trace_id: str) -> pd.DataFrame:
        """Every row of the episode(s) holding ``trace_id``, sorted by episode and step; a
        ``LookupError`` when no row has that trace id."""
        files = self.files(uri)
        ids = self._frame(files, None, ["trace_id", "episode_id"], {"trace_id": trace_id})
        episodes = sorted(set(ids["episode_id"].astype(str))) if len(ids) else []
        if not episodes:
            raise LookupError(f"trace id {trace_id!r} not found under {uri}")
        rows = self._frame(files, None, None, {"episode_id": episodes})
        return rows.sort_values(["episode_id", "step"], kind="stable").reset_index(drop=True)

    def count(
        self, uri: str, window: tuple[datetime, datetime] | None = None, where: Mapping[str, Any] | None = None
    ) -> int:
        """How many rows :meth:`read` would return (counted in the scan; no row is loaded)."""
        return self._count(self.files(uri, window), window, where)

    def count_by(self, uri: str, column: str, window: tuple[datetime, datetime] | None = None) -> dict[str, int]:
        """Rows per value of ``column`` (as text), most rows first, ties by value."""
        import pandas as pd

        files = self.files(uri, window)
        if not files:
            return {}
        if self.engine == "pandas":
            counts = pd.Series(dtype="int64")
            for f in files:
                col = self._frame([f], window, [column], None)
                if column in col:
                    counts = counts.add(col[column].astype(str).value_counts(), fill_value=0)
            pairs = [(str(k), int(v)) for k, v in counts.items()]
        else:
            with self._scan(files) as (cur, source):
                sql, args = self._select(cur, source, window, [column], None)
                if column not in self._names(cur, source):
                    return {}
                got = cur.execute(
                    f"SELECT CAST({_ident(column)} AS VARCHAR) AS v, count(*) AS n FROM ({sql}) GROUP BY 1", args
                ).fetchall()
            pairs = [("None" if v is None else str(v), int(n)) for v, n in got]
        return dict(sorted(pairs, key=lambda kv: (-kv[1], kv[0])))

    def sample_episodes(
        self,
        uri: str,
        max_rows: int,
        window: tuple[datetime, datetime] | None = None,
        columns: Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        total: int | None = None,
        spread: int = 8,
    ) -> tuple[pd.DataFrame, int]:
        """``(rows, total)``: every matching row when there are at most ``max_rows`` of them, else a
        sample of whole episodes: first evenly spaced partition files holding about four times
        ``max_rows`` (at least ``spread`` of them; a sample decodes a few files, not the store),
        then, within them, episodes drawn by a stable hash of their id (:func:`sample_buckets`) at
        the rate that leaves about ``max_rows`` rows, so return-to-go over an episode stays exact.
        ``total`` (the matching row count of every file) is counted when not given."""
        import numpy as np

        files = self.files(uri, window)
        if total is None:
            total = self._count(files, window, where)
        if total <= max_rows:
            return self._frame(files, window, columns, where), total
        wanted = min(len(files), max(spread, -(-len(files) * 4 * max_rows // total)))
        picked = [files[i] for i in sorted(set(np.linspace(0, len(files) - 1, wanted).round().astype(int)))]
        in_picked = total if len(picked) == len(files) else self._count(picked, window, where)
        if in_picked <= max_rows:
            return self._frame(picked, window, columns, where), total
        keep = int(SAMPLE_BUCKETS * max_rows / in_picked)
        if self.engine == "pandas":
            df = self._frame(picked, window, columns, where)
            return df[sample_buckets(df["episode_id"].astype(str).tolist()) < keep].reset_index(drop=True), total
        with self._scan(picked) as (cur, source):
            cols = list(columns) if columns else None
            if cols is not None and "episode_id" not in cols:
                cols.append("episode_id")
            sql, args = self._select(cur, source, window, cols, where)
            table = cur.sql(f"SELECT * FROM ({sql}) WHERE {BUCKET_SQL} < {keep}", params=args).to_arrow_table()
        df = self._to_pandas(table, picked)
        if columns and "episode_id" not in columns:
            df = df.drop(columns="episode_id")
        return df, total

    def query(
        self, uri: str, sql: str, params: Sequence[Any] | None = None, window: tuple[datetime, datetime] | None = None
    ) -> pd.DataFrame:
        """Run ``sql`` (one DuckDB ``SELECT … FROM traces …``; ``?`` placeholders take ``params``) over
        the rows under ``uri`` in ``window``: aggregates that never load the rows into Python."""
        if self.engine != "duckdb":
            raise ValueError("TraceReader.query needs trace_store.engine duckdb (SQL runs in DuckDB)")
        files = self.files(uri, window)
        if not files:
            raise LookupError(f"no trace files under {uri}" + (f" in the window {window}" if window else ""))
        with self._scan(files) as (cur, source):
            inner, args = self._select(cur, source, window, None, None)
            table = cur.sql(f"WITH traces AS ({inner}) {sql}", params=[*args, *(params or [])]).to_arrow_table()
        return self._to_pandas(table)

    # ------------------------------------------------------------------ engines
    def _count(
        self, files: list[str], window: tuple[datetime, datetime] | None, where: Mapping[str, Any] | None
    ) -> int:
        if not files:
            return 0
        if self.engine == "pandas":
            return len(self._frame(files, window, ["ts", *(where or {})], where))
        with self._scan(files) as (cur, source):
            sql, args = self._select(cur, source, window, ["ts"], where)
            return int(cur.execute(f"SELECT count(*) FROM ({sql})", args).fetchone()[0])

    def _frame(
        self,
        files: list[str],
        window: tuple[datetime, datetime] | None,
        columns: Sequence[str] | None,
        where: Mapping[str, Any] | None,
        categorical: bool = False,
    ) -> pd.DataFrame:
        import pandas as pd

        if not files:
            return pd.DataFrame()
        if self.engine == "pandas":
            return pandas_frame(self.storage, files, window, columns, where, categorical)
        with self._scan(files) as (cur, source):
            sql, args = self._select(cur, source, window, columns, where)
            table = cur.sql(sql, params=args).to_arrow_table()
        return self._to_pandas(table, files, categorical)

    def _to_pandas(self, table: pa.Table, files: Sequence[str] = (), categorical: bool = False) -> pd.DataFrame:
        """DuckDB's Arrow result as pandas sees a file of the store: with the first file's pandas
        metadata (nullable ``Int64`` columns and the like), as the pandas engine's concatenation has."""
        table = plain_types(table)
        meta = self._pandas_metadata(files[0]) if files else None
        if meta is not None:
            table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"pandas": meta})
        return table.to_pandas(strings_to_categorical=categorical)

    def _pandas_metadata(self, uri: str) -> bytes | None:
        import pyarrow.parquet as pq

        if uri.startswith("file://"):
            schema = pq.read_schema(uri[len("file://") :])
        else:
            schema = pq.read_schema(uri[len("s3://") :], filesystem=self.storage.arrow_s3_filesystem())
        return (schema.metadata or {}).get(b"pandas")

    def _names(self, cur: Any, source: str) -> list[str]:
        return list(source_schema(cur, source))

    def _select(
        self,
        cur: Any,
        source: str,
        window: tuple[datetime, datetime] | None,
        columns: Sequence[str] | None,
        where: Mapping[str, Any] | None,
    ) -> tuple[str, list[Any]]:
        types = source_schema(cur, source)
        names = list(types)
        keep = [c for c in columns if c in names] if columns else names
        clauses: list[str] = []
        args: list[Any] = []
        if window is not None and "ts" in names:
            ts = '"ts"' if "TIME" in types["ts"].upper() else 'TRY_CAST("ts" AS TIMESTAMPTZ)'
            clauses += [f"{ts} >= ?", f"{ts} < ?"]
            args += [window[0], window[1]]
        for col, value in (where or {}).items():
            if col not in names:
                clauses.append("FALSE")
                continue
            if isinstance(value, (list, tuple, set, frozenset)):
                values = list(value)
                if not values:
                    clauses.append("FALSE")
                    continue
                clauses.append(f"{_ident(col)} IN ({', '.join('?' * len(values))})")
                args += values
            else:
                clauses.append(f"{_ident(col)} = ?")
                args.append(value)
        sql = f"SELECT {', '.join(_ident(c) for c in keep) or '*'} FROM {source}"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        return sql, args

    class _Scan:
        """A cursor and the FROM clause scanning ``files`` (local parquet, or an S3 dataset)."""

        def __init__(self, reader: TraceReader, files: list[str]) -> None:
            self.reader, self.files = reader, files
            self.cur: Any = None

        def __enter__(self) -> tuple[Any, str]:
            self.cur = cursor(self.reader.config)
            if all(f.startswith("file://") for f in self.files):
                paths = ", ".join("'" + glob_literal(f[len("file://") :]).replace("'", "''") + "'" for f in self.files)
                return self.cur, f"read_parquet([{paths}], union_by_name = true, hive_partitioning = false)"
            dataset = self.reader._arrow_dataset(self.files)
            name = "_trace_files_" + hashlib.sha1("\n".join(self.files).encode()).hexdigest()[:16]
            self.cur.register(name, dataset)  # named after the files: the schema cache's key
            return self.cur, name

        def __exit__(self, *exc: object) -> None:
            self.cur.close()

    def _scan(self, files: list[str]) -> TraceReader._Scan:
        return TraceReader._Scan(self, files)

    def _arrow_dataset(self, files: list[str]) -> Any:
        """A pyarrow dataset over S3 (and local) files, with the union of their schemas."""
        import pyarrow as pa
        import pyarrow.dataset as ds
        import pyarrow.fs as pafs

        remote = [f for f in files if f.startswith("s3://")]
        local = [f for f in files if not f.startswith("s3://")]  # file:// URIs and plain paths
        parts = []
        if remote:
            fs = self.storage.arrow_s3_filesystem()
            parts.append(ds.dataset([f[len("s3://") :] for f in remote], filesystem=fs, format="parquet"))
        if local:
            paths = [f.removeprefix("file://") for f in local]
            parts.append(ds.dataset(paths, filesystem=pafs.LocalFileSystem(), format="parquet"))
        schemas = [frag.physical_schema for part in parts for frag in part.get_fragments()]
        schema = pa.unify_schemas(schemas, promote_options="default")
        parts = [ds.dataset(p.files, filesystem=p.filesystem, format="parquet", schema=schema) for p in parts]
        return parts[0] if len(parts) == 1 else ds.dataset(parts)
