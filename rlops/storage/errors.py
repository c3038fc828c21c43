"""The errors :mod:`rlops.storage.backend` raises (importable from there too)."""

from __future__ import annotations

from rlops.common.errors import InfrastructureError


class StorageError(InfrastructureError):
    """An object operation that failed for good (after retries, or on a permanent error)."""

    def __init__(self, message: str, *, op: str = "", uri: str = "", attempts: int = 0) -> None:
        super().__init__(message)
        self.op, self.uri, self.attempts = op, uri, attempts


class StorageNotFoundError(StorageError, FileNotFoundError):
    """The object (or local file) does not exist."""
