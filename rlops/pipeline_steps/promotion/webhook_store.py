"""What the webhook receiver must not forget across requests and restarts: one SQLite file.

* **Deliveries seen.** A signed delivery is accepted once: its id is recorded atomically
  (``INSERT`` on the primary key) before it is acted on, so a replayed delivery — the same signed
  request sent again while its timestamp is still inside the tolerance, e.g. after a rollback — is
  refused, by this process or by another receiver on the same file. Ids older than
  ``keep_s`` are pruned (a replay that old already fails the timestamp check).
* **Requests not yet delivered.** In ``airflow`` mode a promotion request is kept here until
  Airflow's REST API accepted it; a receiver started later delivers what an earlier one could not.

The file lives at ``promotion.webhook.state_db`` (default ``rlops-data/webhook.db`` under the
project home).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS deliveries (id TEXT PRIMARY KEY, seen_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS pending (id TEXT PRIMARY KEY, payload TEXT NOT NULL, attempts INTEGER NOT NULL, "
    "last_error TEXT NOT NULL DEFAULT '', next_try REAL NOT NULL)",
)


@dataclass(frozen=True)
class PendingRequest:
    """A promotion request Airflow has not accepted yet."""

    delivery_id: str
    payload: dict[str, Any]
    attempts: int
    last_error: str


class WebhookStore:
    """Delivery ids seen and requests not yet delivered (see the module doc)."""

    def __init__(self, path: str | Path, keep_s: float = 3600.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.keep_s = float(keep_s)
        self._lock = threading.Lock()
        with self._connect() as db:
            for stmt in _SCHEMA:
                db.execute(stmt)

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30, isolation_level=None)

    def first_time(self, delivery_id: str, now: float | None = None) -> bool:
        """Record ``delivery_id``; False when it was seen before (a replay)."""
        now = time.time() if now is None else now
        with self._lock, self._connect() as db:
            db.execute("DELETE FROM deliveries WHERE seen_at < ?", (now - self.keep_s,))
            try:
                db.execute("INSERT INTO deliveries (id, seen_at) VALUES (?, ?)", (delivery_id, now))
            except sqlite3.IntegrityError:
                return False
        return True

    def keep(self, delivery_id: str, payload: Mapping[str, Any], error: str, retry_in_s: float) -> None:
        """Keep (or update) an undelivered request, to be tried again in ``retry_in_s`` seconds."""
        with self._lock, self._connect() as db:
            db.execute(
                "INSERT INTO pending (id, payload, attempts, last_error, next_try) VALUES (?, ?, 1, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET attempts = attempts + 1, last_error = excluded.last_error, "
                "next_try = excluded.next_try",
                (delivery_id, json.dumps(dict(payload)), error[:2000], time.time() + retry_in_s),
            )

    def due(self, now: float | None = None) -> list[PendingRequest]:
        """Requests whose next try is due, oldest first."""
        now = time.time() if now is None else now
        with self._lock, self._connect() as db:
            rows = db.execute(
                "SELECT id, payload, attempts, last_error FROM pending WHERE next_try <= ? ORDER BY next_try", (now,)
            ).fetchall()
        return [PendingRequest(r[0], json.loads(r[1]), int(r[2]), str(r[3])) for r in rows]

    def pending(self) -> list[PendingRequest]:
        return self.due(float("inf"))

    def delivered(self, delivery_id: str) -> None:
        with self._lock, self._connect() as db:
            db.execute("DELETE FROM pending WHERE id = ?", (delivery_id,))
