"""The S3 side of :class:`rlops.storage.backend.Storage`: the boto3 client, which errors
are transient, retries with exponential backoff, and put-then-verify of written objects.

:class:`S3Access` is a mixin of ``Storage``: it reads the settings ``Storage.__init__`` sets
(``endpoint_url``, ``retries``, ``backoff_s``, the timeouts, ``_s3``, ``_sleep``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from rlops.storage.errors import StorageError, StorageNotFoundError

T = TypeVar("T")

_THROTTLE_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "SlowDown",
        "RequestTimeout",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "InternalError",
        "ServiceUnavailable",
    }
)
_NOT_FOUND_CODES = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})


def split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"S3 URI {uri!r} has no bucket; expected s3://bucket/key")
    return bucket, key


def unwrap(exc: BaseException) -> BaseException:
    """boto3's managed transfers re-raise client errors as S3UploadFailedError; classify the
    underlying error instead."""
    from boto3.exceptions import S3UploadFailedError

    if isinstance(exc, S3UploadFailedError) and exc.__context__ is not None:
        cause: BaseException = exc.__context__
        return cause
    return exc


def is_transient_s3(exc: BaseException) -> bool:
    from boto3.exceptions import RetriesExceededError
    from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError, IncompleteReadError

    exc = unwrap(exc)
    if isinstance(exc, RetriesExceededError):
        return True
    if isinstance(exc, (ConnectionError, HTTPClientError, IncompleteReadError)):
        return True
    if isinstance(exc, ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        code = str(exc.response.get("Error", {}).get("Code", ""))
        return status >= 500 or status == 429 or code in _THROTTLE_CODES
    return isinstance(exc, BotoCoreError) and "timeout" in type(exc).__name__.lower()


def is_not_found_s3(exc: BaseException) -> bool:
    from botocore.exceptions import ClientError

    exc = unwrap(exc)
    return isinstance(exc, ClientError) and (str(exc.response.get("Error", {}).get("Code", "")) in _NOT_FOUND_CODES)


class S3Access:
    """S3 client, retries and error wording shared by every ``Storage`` operation."""

    endpoint_url: str | None
    retries: int
    backoff_s: float
    connect_timeout_s: float
    read_timeout_s: float
    _s3: Any
    _sleep: Callable[[float], None]

    @property
    def s3_client(self) -> Any:
        """The boto3 S3 client (created on first use; botocore's own retries are off so that
        :attr:`retries` is the real number of attempts)."""
        if self._s3 is None:
            import boto3
            from botocore.config import Config

            cfg = Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                connect_timeout=self.connect_timeout_s,
                read_timeout=self.read_timeout_s,
                s3={"addressing_style": "path"} if self.endpoint_url else None,
            )
            self._s3 = boto3.session.Session().client("s3", endpoint_url=self.endpoint_url, config=cfg)
        return self._s3

    def arrow_s3_filesystem(self) -> Any:
        """A ``pyarrow.fs.S3FileSystem`` with this storage's endpoint, timeouts and attempts, and the
        credentials and region boto3 resolves (environment, profile, instance role), for readers
        that scan parquet objects in place (the trace store's DuckDB reader)."""
        import boto3
        import pyarrow.fs as pafs

        session = boto3.session.Session()
        creds = session.get_credentials()
        kwargs: dict[str, Any] = {
            "region": session.region_name or "us-east-1",
            "connect_timeout": self.connect_timeout_s,
            "request_timeout": self.read_timeout_s,
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=self.retries),
        }
        if creds is not None:
            frozen = creds.get_frozen_credentials()
            kwargs.update(access_key=frozen.access_key, secret_key=frozen.secret_key, session_token=frozen.token)
        if self.endpoint_url:
            scheme, _, host = self.endpoint_url.partition("://")
            kwargs.update(
                endpoint_override=host.rstrip("/") if host else scheme,
                scheme=scheme if host else "https",
                force_virtual_addressing=False,
            )
        return pafs.S3FileSystem(**kwargs)

    def _retry(self, op: str, uri: str, fn: Callable[[], T]) -> T:
        """Run ``fn`` with retries on transient S3 errors; wrap the final failure."""
        last: BaseException | None = None
        for attempt in range(1, self.retries + 1):
            try:
                return fn()
            except StorageError:
                raise
            except Exception as exc:  # noqa: BLE001 - classified below, re-raised wrapped
                if is_not_found_s3(exc):
                    code = str(getattr(unwrap(exc), "response", {}).get("Error", {}).get("Code"))
                    what = (
                        f"bucket {split_s3(uri)[0]!r} does not exist; create it "
                        "(Storage.ensure_root) or fix storage.root"
                        if code == "NoSuchBucket"
                        else "the object does not exist"
                    )
                    raise StorageNotFoundError(
                        f"storage {op} failed for {uri} against {self._endpoint_label(uri)}: {what}",
                        op=op,
                        uri=uri,
                        attempts=attempt,
                    ) from exc
                last = exc
                if not is_transient_s3(exc):
                    raise self._error(op, uri, attempt, exc, transient=False) from exc
                if attempt < self.retries:
                    self._sleep(self.backoff_s * (2 ** (attempt - 1)))
        assert last is not None
        raise self._error(op, uri, self.retries, last, transient=True) from last

    def _endpoint_label(self, uri: str) -> str:
        if uri.startswith("s3://"):
            return self.endpoint_url or "AWS S3 (default endpoint)"
        return "local filesystem"

    def _error(self, op: str, uri: str, attempts: int, exc: BaseException, transient: bool) -> StorageError:
        why = (
            "the error persisted through every retry; check that the endpoint is reachable "
            "and the credentials are valid"
            if transient
            else "the error is not transient, so it was not retried"
        )
        return StorageError(
            f"storage {op} failed for {uri} against {self._endpoint_label(uri)} after "
            f"{attempts} attempt(s): {type(exc).__name__}: {exc}. {why.capitalize()}; "
            "no partial object was left behind.",
            op=op,
            uri=uri,
            attempts=attempts,
        )

    def _verify_s3(self, uri: str, bucket: str, key: str, size: int, etag: str | None) -> None:
        head = self.s3_client.head_object(Bucket=bucket, Key=key)
        if int(head["ContentLength"]) != size or (etag and head.get("ETag") != etag):
            # A mismatch means another writer raced us or the upload was damaged: remove it
            # rather than leave an object that does not match what the caller asked for.
            self.s3_client.delete_object(Bucket=bucket, Key=key)
            raise StorageError(
                f"write verification failed for {uri}: stored size "
                f"{head['ContentLength']} / ETag {head.get('ETag')} != expected "
                f"{size} / {etag}; the object was removed",
                op="write",
                uri=uri,
            )
