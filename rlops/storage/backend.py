"""Object storage for rlops: every read and write of traces, reports and checkpoints goes here.

Two kinds of URI are understood, and one :class:`Storage` handles both, whatever its root:

* ``file:///abs/path`` (the default; a relative ``file://rel`` or plain path is made absolute
  with :func:`rlops.common.config.resolve_local`), and
* ``s3://bucket/key`` through boto3, with ``endpoint_url`` for S3-compatible servers (MinIO, moto);
  client, retries and write verification live in :mod:`rlops.storage.s3`.

Guarantees, so a step can be re-run after any failure:

* **Atomic writes.** Local files are written to a hidden temp file in the same folder and moved
  into place with ``os.replace``; S3 objects are put and then verified (size and ETag from
  ``head_object``). A reader never sees half an object and a failed write leaves none behind.
* **Retries.** Transient errors (connection refused/reset, timeouts, HTTP 5xx, throttling) are
  retried with exponential backoff; after the last attempt a :class:`StorageError` says which
  operation on which URI, against which endpoint, how many attempts, and the last error.

Typical use::

    storage = Storage.from_params(load_params())  # or StepContext.storage
    uri = storage.join("traces", "scenario=credit_approval", "date=2026-01-01", "part-0.parquet")
    storage.write_parquet(uri, df)
    df = storage.read_parquet(storage.join("traces", "scenario=credit_approval"))
"""

from __future__ import annotations

import builtins
import io
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rlops.common.config import resolve_local
from rlops.common.params_sources import params_block
from rlops.storage.errors import StorageError, StorageNotFoundError
from rlops.storage.s3 import S3Access, split_s3

if TYPE_CHECKING:  # heavy imports stay lazy so DAG parsing does not pay for them
    import pandas as pd
    import pyarrow as pa

    from rlops.common.params_model import Params, StorageParams

_TMP_PREFIX = ".tmp-"  # local temp files; hidden from list() so a crashed write is never read

__all__ = ["Storage", "StorageError", "StorageNotFoundError", "get_storage", "normalize_uri"]


def normalize_uri(uri: str) -> str:
    """Return ``uri`` in canonical form: ``file:///abs/path`` or ``s3://bucket/key``.

    Plain paths and relative ``file://`` URIs are resolved against ``RLOPS_HOME``.
    """
    uri = str(uri)
    if uri.startswith("s3://"):
        split_s3(uri)
        return uri.rstrip("/") if uri.count("/") > 3 else uri
    if "://" in uri and not uri.startswith("file://"):
        raise ValueError(f"unsupported storage URI {uri!r}; expected file://<path>, a local path or s3://bucket/key")
    resolved = resolve_local(uri)
    path = resolved[len("file://") :] if resolved.startswith("file://") else resolved
    return "file://" + os.path.normpath(path)


class Storage(S3Access):
    """Read and write objects under ``root`` (``file://…`` or ``s3://…``), atomically, with retries.

    Methods take full URIs (build them with :meth:`join`), so one instance can also reach
    URIs outside its root, e.g. an S3 landing zone next to a local trace store.
    """

    def __init__(
        self,
        root_uri: str,
        endpoint_url: str | None = None,
        retries: int = 4,
        backoff_s: float = 0.5,
        connect_timeout_s: float = 5.0,
        read_timeout_s: float = 60.0,
    ) -> None:
        if retries < 1:
            raise ValueError(f"storage retries must be >= 1 (attempts per operation), got {retries}")
        self.root = normalize_uri(root_uri)
        self.endpoint_url = endpoint_url or None
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.read_timeout_s = float(read_timeout_s)
        self._s3: Any = None
        self._sleep: Callable[[float], None] = time.sleep

    @classmethod
    def from_params(cls, params: Params | StorageParams | Mapping[str, Any]) -> Storage:
        """Build from the typed ``storage`` block (or the params document holding it; env
        overrides already applied): the defaults are the params model's."""
        cfg: StorageParams = params_block(params, "storage")
        return cls(
            root_uri=cfg.root,
            endpoint_url=cfg.s3_endpoint_url or None,
            retries=cfg.retries,
            backoff_s=cfg.backoff_s,
            connect_timeout_s=cfg.connect_timeout_s,
            read_timeout_s=cfg.read_timeout_s,
        )

    def __repr__(self) -> str:
        return f"Storage(root={self.root!r}, endpoint_url={self.endpoint_url!r})"

    @staticmethod
    def _path(uri: str) -> Path:
        return Path(uri[len("file://") :])

    @contextmanager
    def _local_op(self, op: str, uri: str) -> Iterator[None]:
        try:
            yield
        except FileNotFoundError as exc:
            raise StorageNotFoundError(f"{op}: {uri} does not exist", op=op, uri=uri, attempts=1) from exc
        except OSError as exc:
            raise self._error(op, uri, 1, exc, transient=False) from exc

    def _atomic_local(self, path: Path, write: Callable[[IO[bytes]], object]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TMP_PREFIX + path.name + ".")
        try:
            with os.fdopen(fd, "wb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # ------------------------------------------------------------------ URIs
    def join(self, *parts: str) -> str:
        """URI of ``parts`` under the root; ``..`` and empty parts are rejected."""
        clean: list[str] = []
        for part in parts:
            for seg in str(part).strip("/").split("/"):
                if seg in ("", "."):
                    continue
                if seg == "..":
                    raise ValueError(f"storage path part {part!r} escapes the root {self.root}")
                clean.append(seg)
        return "/".join([self.root.rstrip("/"), *clean])

    # ------------------------------------------------------------------ bytes
    def write_bytes(self, uri: str, data: bytes) -> str:
        """Write ``data`` atomically to ``uri``; returns the normalized URI."""
        uri = normalize_uri(uri)
        if uri.startswith("s3://"):
            bucket, key = split_s3(uri)

            def put() -> None:
                resp = self.s3_client.put_object(Bucket=bucket, Key=key, Body=data)
                self._verify_s3(uri, bucket, key, len(data), resp.get("ETag"))

            self._retry("write", uri, put)
        else:
            with self._local_op("write", uri):
                self._atomic_local(self._path(uri), lambda fh: fh.write(data))
        return uri

    def read_bytes(self, uri: str) -> bytes:
        uri = normalize_uri(uri)
        if uri.startswith("s3://"):
            bucket, key = split_s3(uri)
            data: bytes = self._retry(
                "read", uri, lambda: self.s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
            )
            return data
        with self._local_op("read", uri):
            return self._path(uri).read_bytes()

    def write_text(self, uri: str, text: str, encoding: str = "utf-8") -> str:
        return self.write_bytes(uri, text.encode(encoding))

    def read_text(self, uri: str, encoding: str = "utf-8") -> str:
        return self.read_bytes(uri).decode(encoding)

    def write_json(self, uri: str, obj: Any, indent: int | None = 2) -> str:
        return self.write_text(uri, json.dumps(obj, indent=indent, sort_keys=True, default=str))

    def read_json(self, uri: str) -> Any:
        return json.loads(self.read_text(uri))

    def exists(self, uri: str) -> bool:
        """Whether an object (a local file, not a folder) exists at ``uri``."""
        uri = normalize_uri(uri)
        if uri.startswith("s3://"):
            bucket, key = split_s3(uri)
            try:
                self._retry("exists", uri, lambda: self.s3_client.head_object(Bucket=bucket, Key=key))
            except StorageNotFoundError:
                return False
            return True
        with self._local_op("exists", uri):  # e.g. a name too long: an error, never "not there"
            return self._path(uri).is_file()

    # ------------------------------------------------------------------ prefixes
    def list(self, prefix_uri: str, suffix: str | None = None) -> list[str]:
        """All object URIs under the folder ``prefix_uri`` (recursive, sorted), optionally
        only those ending with ``suffix``. A missing folder gives an empty list; a missing
        bucket (or an endpoint answering 404 to the listing) is a :class:`StorageError`."""
        prefix_uri = normalize_uri(prefix_uri)
        if prefix_uri.startswith("s3://"):
            bucket, key = split_s3(prefix_uri)
            key = key.rstrip("/") + "/" if key else ""

            def pages() -> list[str]:
                out: list[str] = []
                for page in self.s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key):
                    out.extend(f"s3://{bucket}/{o['Key']}" for o in page.get("Contents", []))
                return out

            try:
                uris = self._retry("list", prefix_uri, pages)
            except StorageNotFoundError as exc:
                # A missing folder lists as empty, but a 404 for the listing itself means the
                # bucket is missing or the endpoint is not S3: reading that as "no objects"
                # would turn an outage into "0 rows", exit 0.
                raise StorageError(
                    f"storage list failed for {prefix_uri} against "
                    f"{self._endpoint_label(prefix_uri)}: the endpoint answered "
                    f"'not found' for the bucket {bucket!r} itself ({exc}); "
                    "expected an existing bucket: check storage.root, the "
                    "landing/trace URIs and s3_endpoint_url",
                    op="list",
                    uri=prefix_uri,
                    attempts=exc.attempts,
                ) from exc
        else:
            root = self._path(prefix_uri)
            uris = (
                []
                if not root.is_dir()
                else ["file://" + str(p) for p in root.rglob("*") if p.is_file() and not p.name.startswith(_TMP_PREFIX)]
            )
        if suffix:
            uris = [u for u in uris if u.endswith(suffix)]
        return sorted(uris)

    def delete(self, uri: str) -> None:
        """Delete one object; a missing object is not an error."""
        uri = normalize_uri(uri)
        if uri.startswith("s3://"):
            bucket, key = split_s3(uri)
            self._retry("delete", uri, lambda: self.s3_client.delete_object(Bucket=bucket, Key=key))
        else:
            with self._local_op("delete", uri):
                self._path(uri).unlink(missing_ok=True)

    def delete_prefix(self, prefix_uri: str) -> int:
        """Delete everything under the folder ``prefix_uri`` (to overwrite a partition
        idempotently); returns how many objects were removed."""
        prefix_uri = normalize_uri(prefix_uri)
        top = not split_s3(prefix_uri)[1] if prefix_uri.startswith("s3://") else self._path(prefix_uri) == Path("/")
        if top or prefix_uri == self.root:
            raise ValueError(
                f"refusing to delete the whole storage root or bucket {prefix_uri}; pass a partition prefix under it"
            )
        uris = self.list(prefix_uri)
        if prefix_uri.startswith("s3://"):
            bucket, _ = split_s3(prefix_uri)
            for i in range(0, len(uris), 1000):  # delete_objects takes at most 1000 keys
                batch = [{"Key": split_s3(u)[1]} for u in uris[i : i + 1000]]

                def delete(b: builtins.list[dict[str, str]] = batch) -> Any:
                    return self.s3_client.delete_objects(Bucket=bucket, Delete={"Objects": b, "Quiet": True})

                self._retry("delete_prefix", prefix_uri, delete)
        else:
            with self._local_op("delete_prefix", prefix_uri):
                path = self._path(prefix_uri)
                if path.is_dir():
                    shutil.rmtree(path)
        return len(uris)

    def ensure_root(self) -> None:
        """Create the root folder, or the root bucket when it does not exist yet."""
        if self.root.startswith("s3://"):
            bucket, _ = split_s3(self.root)
            try:
                self._retry("head_bucket", self.root, lambda: self.s3_client.head_bucket(Bucket=bucket))
            except StorageNotFoundError:
                self._retry("create_bucket", self.root, lambda: self.s3_client.create_bucket(Bucket=bucket))
        else:
            with self._local_op("mkdir", self.root):
                self._path(self.root).mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ files
    def upload_file(self, local_path: str | os.PathLike[str], uri: str) -> str:
        """Copy a local file to ``uri`` (atomic; the source file is never modified)."""
        src, uri = Path(local_path), normalize_uri(uri)
        if not src.is_file():
            raise StorageNotFoundError(f"upload: local file {src} does not exist", op="upload", uri=uri)
        if uri.startswith("s3://"):
            bucket, key = split_s3(uri)

            def up() -> None:
                self.s3_client.upload_file(str(src), bucket, key)
                self._verify_s3(uri, bucket, key, src.stat().st_size, None)

            self._retry("upload", uri, up)
        else:
            with self._local_op("upload", uri):

                def copy(fh: IO[bytes]) -> None:
                    with src.open("rb") as inp:
                        shutil.copyfileobj(inp, fh, 1 << 20)

                self._atomic_local(self._path(uri), copy)
        return uri

    def download_file(self, uri: str, local_path: str | os.PathLike[str]) -> Path:
        """Copy the object at ``uri`` to ``local_path`` (atomic replace of the destination)."""
        uri, dst = normalize_uri(uri), Path(local_path)
        if uri.startswith("s3://"):
            bucket, key = split_s3(uri)

            def down(fh: IO[bytes]) -> None:
                def once() -> None:
                    fh.seek(0)
                    fh.truncate()
                    self.s3_client.download_fileobj(bucket, key, fh)

                self._retry("download", uri, once)

            self._atomic_local(dst, down)
        else:
            with self._local_op("download", uri):

                def copy(fh: IO[bytes]) -> None:
                    with self._path(uri).open("rb") as inp:
                        shutil.copyfileobj(inp, fh, 1 << 20)

                self._atomic_local(dst, copy)
        return dst

    @contextmanager
    def local_path(self, uri: str) -> Iterator[Path]:
        """A local path to read ``uri`` from: the file itself for ``file://``, a temporary
        download (removed afterwards) for ``s3://``."""
        uri = normalize_uri(uri)
        if not uri.startswith("s3://"):
            path = self._path(uri)
            if not path.is_file():
                raise StorageNotFoundError(f"read: {uri} does not exist", op="read", uri=uri)
            yield path
            return
        with tempfile.TemporaryDirectory(prefix="rlops-dl-") as tmp:
            yield self.download_file(uri, Path(tmp) / uri.rsplit("/", 1)[-1])

    @contextmanager
    def open_stream(self, uri: str, encoding: str = "utf-8", gzip: bool = False) -> Iterator[IO[str]]:
        """Open ``uri`` as a text stream to iterate line by line (big JSONL files are never
        loaded whole), gunzipping it on the fly with ``gzip``. Only opening is retried: a broken
        stream mid-read, or a corrupt gzip file, raises :class:`StorageError` naming the URI."""
        import gzip as gz
        import zlib

        uri = normalize_uri(uri)
        if uri.startswith("s3://"):
            bucket, key = split_s3(uri)
            body = self._retry("open", uri, lambda: self.s3_client.get_object(Bucket=bucket, Key=key)["Body"])
            raw: IO[bytes] = io.BufferedReader(body, 1 << 20)
        else:
            with self._local_op("open", uri):
                raw = self._path(uri).open("rb")
        binary: IO[bytes] | gz.GzipFile = gz.GzipFile(fileobj=raw, mode="rb") if gzip else raw
        stream = io.TextIOWrapper(binary, encoding=encoding)
        try:
            yield stream
        except (OSError, EOFError, zlib.error) as exc:
            if isinstance(exc, StorageError):
                raise
            raise self._error("read", uri, 1, exc, transient=False) from exc
        finally:
            stream.close()
            raw.close()

    # ------------------------------------------------------------------ parquet
    def write_parquet(self, uri: str, data: pd.DataFrame | pa.Table, compression: str = "zstd", **options: Any) -> str:
        """Write a DataFrame or Arrow table as one parquet object (atomically); ``options`` go to
        ``pyarrow.parquet.write_table`` (e.g. bloom filters)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf, compression=compression, **options)
        return self.write_bytes(uri, buf.getvalue().to_pybytes())

    def read_parquet_table(self, uri: str, columns: builtins.list[str] | None = None) -> pa.Table:
        """Read one parquet object, or every ``*.parquet`` under a prefix. Hive-style path
        parts (``date=2026-01-01``) become string columns when the files lack them."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        uri = normalize_uri(uri)
        files = [uri] if uri.endswith(".parquet") and self.exists(uri) else self.list(uri, suffix=".parquet")
        if not files:
            raise StorageNotFoundError(f"read_parquet: no parquet file at or under {uri}", op="read_parquet", uri=uri)
        tables = []
        for f in files:
            src: Any = pa.BufferReader(self.read_bytes(f)) if f.startswith("s3://") else str(self._path(f))
            t = pq.read_table(src, columns=columns)
            rel = f[len(uri) :].strip("/").split("/")[:-1] if f != uri else []
            for seg in rel:
                name, eq, value = seg.partition("=")
                if eq and name not in t.column_names and (columns is None or name in columns):
                    t = t.append_column(name, pa.array([value] * t.num_rows, pa.string()))
            tables.append(t)
        return pa.concat_tables(tables, promote_options="default")

    def read_parquet(self, uri: str, columns: builtins.list[str] | None = None) -> pd.DataFrame:
        """:meth:`read_parquet_table` as a pandas DataFrame."""
        return self.read_parquet_table(uri, columns=columns).to_pandas()


def get_storage(root_uri: str, endpoint_url: str | None = None, retries: int = 4, backoff_s: float = 0.5) -> Storage:
    """Shorthand for :class:`Storage` with explicit settings."""
    return Storage(root_uri, endpoint_url=endpoint_url, retries=retries, backoff_s=backoff_s)
