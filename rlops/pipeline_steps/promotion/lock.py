"""One promotion at a time per registered model: a candidate is always gated against the champion
it replaces.

Two guards. :func:`promotion_lock` is an exclusive ``flock`` on a file named after the tracking
URI and the model, held from the evaluation to the alias move, so concurrent ``promote`` runs
(two Airflow tasks, a CLI call next to a DAG run) on one host queue up and the second one is
evaluated against the champion the first one left. :func:`check_unchanged` is the compare-and-set
step taken under the lock: the champion alias must still be the version the candidate was gated
against, which also catches a writer that did not take the lock (a manual alias move).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class PromotionBusy(RuntimeError):
    """Another promotion held the lock for longer than the wait allowed."""


class ChampionMoved(RuntimeError):
    """The champion alias changed between the evaluation and the move."""


def lock_path(folder: Path, tracking_uri: str, model_name: str) -> Path:
    digest = hashlib.sha256(f"{tracking_uri}\n{model_name}".encode()).hexdigest()[:16]
    return folder / f"promote-{model_name}-{digest}.lock"


@contextmanager
def promotion_lock(path: Path, timeout_s: float = 900.0, poll_s: float = 0.2) -> Iterator[float]:
    """Hold the exclusive lock at ``path``; yields the seconds spent waiting for it."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    t0 = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 > timeout_s:
                    raise PromotionBusy(
                        f"another promotion has held {path} for over {timeout_s:g} s; "
                        "nothing was changed — retry when it has finished"
                    ) from None
                time.sleep(poll_s)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield time.monotonic() - t0
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def check_unchanged(gated_against: str | None, current: str | None, model_name: str) -> None:
    """Compare-and-set guard: refuse the move when the champion is no longer ``gated_against``."""
    if (gated_against or None) != (current or None):
        raise ChampionMoved(
            f"{model_name}: the champion moved from {gated_against or 'none'} to "
            f"{current or 'none'} while the candidate was evaluated; it was not gated "
            "against the version it would replace, so nothing was changed"
        )
