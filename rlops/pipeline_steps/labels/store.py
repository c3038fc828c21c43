"""The label queue's SQL tables (SQLAlchemy Core; SQLite by default, PostgreSQL in production).

``label_items``
    one row per state waiting for (or given) a human label: the state as JSON of its visible
    fields, the legal (candidate) actions, the mask and the earlier actions of its episode (to
    rebuild the policy's observation), the trace it came from, its cluster and entropy, and a
    ``status``: ``pending`` → ``exported`` (sent to Label Studio, with the run key of that
    export) → ``labelled``.
``labels``
    the chosen action per item, who chose it and when; one row per item. A label is replaced only
    by a provably newer one (its ``labelled_at`` a later instant): an older export never
    relabels an item (see :meth:`LabelStore.stale_labels`).
``label_votes``
    every annotator's answer per item (one row per item and annotator), so two annotators of one
    task keep both their labels.

The item id is a hash of (scenario, episode, step), so the same state is never queued twice.
Enqueueing is idempotent per run key: a run first removes the still-pending items it queued
before, then inserts its items that are not in the table yet — all in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pandas as pd
import sqlalchemy as sa

from rlops.common.config import resolve_local
from rlops.common.errors import UserError

PENDING, EXPORTED, LABELLED = "pending", "exported", "labelled"
_CHUNK = 500  # ids per IN (...) clause: well under SQLite's and Postgres' parameter limits


def _utc(value: Any) -> datetime | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    ts = pd.Timestamp(value)
    if pd.isna(ts):
        return None
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    out: datetime | None = ts.to_pydatetime()
    return out


@dataclass(frozen=True)
class EnqueueResult:
    inserted: int
    replaced_pending: int
    already_queued: int


class LabelStore:
    """The two tables behind one SQLAlchemy engine. ``schema`` places them in a Postgres schema."""

    def __init__(self, url: str, schema: str | None = None) -> None:
        self.url = resolve_local(url)
        if self.url.startswith("sqlite:///"):
            from pathlib import Path

            Path(self.url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = sa.create_engine(self.url, future=True, pool_pre_ping=True)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError) as exc:
            raise UserError(
                f"label queue database URL {url!r} (params label_queue.db_url, RLOPS_QUEUE_DB) cannot be used: "
                f"{exc}; expected e.g. sqlite:///queue.db or postgresql+psycopg2://user@host/db"
            ) from None
        md = sa.MetaData(schema=schema)
        self.items = sa.Table(
            "label_items",
            md,
            sa.Column("item_id", sa.String(64), primary_key=True),
            sa.Column("scenario", sa.String(128), nullable=False, index=True),
            sa.Column("run_key", sa.String(64), nullable=False, index=True),
            sa.Column("status", sa.String(16), nullable=False, index=True),
            sa.Column("cluster_id", sa.Integer),
            sa.Column("cluster_entropy", sa.Float),
            sa.Column("norm_entropy", sa.Float),
            sa.Column("trace_id", sa.String(256)),
            sa.Column("episode_id", sa.String(256)),
            sa.Column("step", sa.Integer),
            sa.Column("ts", sa.DateTime(timezone=True)),
            sa.Column("policy_version", sa.String(128)),
            sa.Column("action_taken", sa.String(128)),
            sa.Column("state", sa.Text, nullable=False),
            sa.Column("candidate_actions", sa.Text, nullable=False),
            sa.Column("action_mask", sa.String(256), nullable=False),
            sa.Column("history", sa.Text),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("exported_at", sa.DateTime(timezone=True)),
            sa.Column("export_key", sa.String(64)),
        )
        self.labels = sa.Table(
            "labels",
            md,
            sa.Column("item_id", sa.String(64), primary_key=True),
            sa.Column("scenario", sa.String(128), nullable=False, index=True),
            sa.Column("label", sa.String(128), nullable=False),
            sa.Column("annotator", sa.String(256)),
            sa.Column("labelled_at", sa.DateTime(timezone=True)),
            sa.Column("source", sa.String(64)),
            sa.Column("imported_at", sa.DateTime(timezone=True), nullable=False),
        )
        self.votes = sa.Table(
            "label_votes",
            md,
            sa.Column("item_id", sa.String(64), primary_key=True),
            sa.Column("annotator", sa.String(256), primary_key=True),
            sa.Column("scenario", sa.String(128), nullable=False, index=True),
            sa.Column("label", sa.String(128), nullable=False),
            sa.Column("labelled_at", sa.DateTime(timezone=True)),
            sa.Column("imported_at", sa.DateTime(timezone=True), nullable=False),
        )
        self._md = md
        self._ready = False

    def __repr__(self) -> str:
        return f"LabelStore({self.engine.url.render_as_string(hide_password=True)!r})"

    def exists(self) -> bool:
        """Whether the tables are there — asked without creating anything (a dry run's question)."""
        if self.url.startswith("sqlite:///"):
            from pathlib import Path

            if not Path(self.url[len("sqlite:///") :]).exists():
                return False
        return bool(sa.inspect(self.engine).has_table(self.labels.name, schema=self.labels.schema))

    def create(self) -> None:
        """Create the tables when missing (safe to call from concurrent runs)."""
        if not self._ready:
            self._md.create_all(self.engine, checkfirst=True)
            self._ready = True

    # ------------------------------------------------------------------ items
    def enqueue(self, scenario: str, run_key: str, items: Sequence[dict[str, Any]]) -> EnqueueResult:
        """Replace this run key's pending items with ``items``, skipping ids already queued."""
        self.create()
        now = datetime.now(UTC)
        t = self.items
        with self.engine.begin() as conn:
            replaced = (
                conn.execute(
                    t.delete().where((t.c.scenario == scenario) & (t.c.run_key == run_key) & (t.c.status == PENDING))
                ).rowcount
                or 0
            )
            ids = [it["item_id"] for it in items]
            existing = set()
            for chunk in _chunks(ids):
                existing |= set(conn.execute(sa.select(t.c.item_id).where(t.c.item_id.in_(chunk))).scalars())
            fresh = [
                {
                    **_item_row(it),
                    "scenario": scenario,
                    "run_key": run_key,
                    "status": PENDING,
                    "created_at": now,
                    "exported_at": None,
                    "export_key": None,
                }
                for it in _unique(items)
                if it["item_id"] not in existing
            ]
            if fresh:
                conn.execute(t.insert(), fresh)
        return EnqueueResult(len(fresh), int(replaced), len(items) - len(fresh))

    def plan_enqueue(self, scenario: str, run_key: str, items: Sequence[dict[str, Any]]) -> EnqueueResult:
        """What :meth:`enqueue` would return, asked without writing or creating anything (a dry
        run's answer): this run key's pending items are the ones it would replace, and every other
        queued id is one it would skip."""
        unique = _unique(items)
        if not self.exists():  # no queue yet: everything would be inserted
            return EnqueueResult(len(unique), 0, len(items) - len(unique))
        t = self.items
        mine = (t.c.scenario == scenario) & (t.c.run_key == run_key) & (t.c.status == PENDING)
        with self.engine.connect() as conn:
            replaced = int(conn.execute(sa.select(sa.func.count()).select_from(t).where(mine)).scalar_one())
            existing: set[str] = set()
            for chunk in _chunks([it["item_id"] for it in items]):
                existing |= set(conn.execute(sa.select(t.c.item_id).where(t.c.item_id.in_(chunk) & ~mine)).scalars())
        fresh = [it for it in unique if it["item_id"] not in existing]
        return EnqueueResult(len(fresh), replaced, len(items) - len(fresh))

    def items_frame(
        self, scenario: str, status: Iterable[str] | None = None, run_key: str | None = None
    ) -> pd.DataFrame:
        self.create()
        t = self.items
        q = sa.select(t).where(t.c.scenario == scenario)
        if status is not None:
            q = q.where(t.c.status.in_(list(status)))
        if run_key is not None:
            q = q.where(t.c.run_key == run_key)
        return self._frame(q)

    def export_batch(self, scenario: str, export_key: str) -> pd.DataFrame:
        """Pending items plus those an earlier export under ``export_key`` already sent, so that
        re-running an export writes the same tasks again (and new pending ones)."""
        self.create()
        t = self.items
        return self._frame(
            sa.select(t).where(
                (t.c.scenario == scenario)
                & ((t.c.status == PENDING) | ((t.c.status == EXPORTED) & (t.c.export_key == export_key)))
            )
        )

    def _frame(self, q: Any) -> pd.DataFrame:
        t = self.items
        with self.engine.connect() as conn:
            rows = conn.execute(q.order_by(t.c.created_at, t.c.item_id)).mappings().all()
        return pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in t.columns])

    def mark(self, item_ids: Sequence[str], status: str, export_key: str | None = None) -> int:
        self.create()
        t = self.items
        n = 0
        values: dict[str, Any] = {"status": status}
        if status == EXPORTED:
            values.update(exported_at=datetime.now(UTC), export_key=export_key)
        with self.engine.begin() as conn:
            for chunk in _chunks(list(item_ids)):
                q = t.update().where(t.c.item_id.in_(chunk))
                if status == EXPORTED:  # never move a labelled item back to exported
                    q = q.where(t.c.status != LABELLED)
                n += conn.execute(q.values(**values)).rowcount or 0
        return n

    def counts(self, scenario: str) -> dict[str, int]:
        self.create()
        t = self.items
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(t.c.status, sa.func.count()).where(t.c.scenario == scenario).group_by(t.c.status)
            ).all()
        return {str(s): int(n) for s, n in rows}

    # ------------------------------------------------------------------ labels
    def stale_labels(self, scenario: str, labels: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The labels that must not replace what the store holds: their item has a label given at a
        later instant, or at a known time while theirs has none. Each comes back with the stored
        label beside it (``{"item_id", "label", "labelled_at", "stored_label", "stored_at"}``)."""
        if not labels or not self.exists():
            return []
        lab = self.labels
        ids = [x["item_id"] for x in labels]
        stored: dict[str, tuple[str, datetime | None]] = {}
        with self.engine.connect() as conn:
            for chunk in _chunks(ids):
                for r in conn.execute(
                    sa.select(lab.c.item_id, lab.c.label, lab.c.labelled_at).where(
                        (lab.c.scenario == scenario) & lab.c.item_id.in_(chunk)
                    )
                ):
                    stored[r.item_id] = (r.label, _utc(r.labelled_at))
        out = []
        for x in labels:
            if x["item_id"] not in stored:
                continue
            old_label, old_at = stored[x["item_id"]]
            new_at = _utc(x.get("labelled_at"))
            if old_at is not None and (new_at is None or new_at < old_at):
                out.append(
                    {
                        "item_id": x["item_id"],
                        "label": x["label"],
                        "labelled_at": x.get("labelled_at"),
                        "stored_label": old_label,
                        "stored_at": old_at.isoformat(),
                    }
                )
        return out

    def add_labels(self, scenario: str, labels: Sequence[dict[str, Any]]) -> int:
        """Insert or replace labels (by item id), record every annotator's answer, and mark the
        items ``labelled``. Callers drop :meth:`stale_labels` first."""
        self.create()
        if not labels:
            return 0
        now = datetime.now(UTC)
        rows = {
            lab["item_id"]: {
                "item_id": lab["item_id"],
                "scenario": scenario,
                "label": lab["label"],
                "annotator": lab.get("annotator"),
                "labelled_at": _utc(lab.get("labelled_at")),
                "source": lab.get("source", "label_studio"),
                "imported_at": now,
            }
            for lab in labels
        }
        ids = list(rows)
        with self.engine.begin() as conn:
            for chunk in _chunks(ids):
                conn.execute(self.labels.delete().where(self.labels.c.item_id.in_(chunk)))
            conn.execute(self.labels.insert(), list(rows.values()))
            votes = {
                (lab["item_id"], str(a.get("annotator") or "")): {
                    "item_id": lab["item_id"],
                    "annotator": str(a.get("annotator") or ""),
                    "scenario": scenario,
                    "label": a["label"],
                    "labelled_at": _utc(a.get("labelled_at")),
                    "imported_at": now,
                }
                for lab in labels
                for a in (lab.get("annotations") or [lab])
            }
            for item_id, annotator in votes:
                conn.execute(
                    self.votes.delete().where((self.votes.c.item_id == item_id) & (self.votes.c.annotator == annotator))
                )
            if votes:
                conn.execute(self.votes.insert(), list(votes.values()))
            for chunk in _chunks(ids):
                conn.execute(self.items.update().where(self.items.c.item_id.in_(chunk)).values(status=LABELLED))
        return len(rows)

    def votes_frame(self, scenario: str) -> pd.DataFrame:
        """Every annotator's answer per item."""
        self.create()
        v = self.votes
        with self.engine.connect() as conn:
            rows = (
                conn.execute(sa.select(v).where(v.c.scenario == scenario).order_by(v.c.item_id, v.c.annotator))
                .mappings()
                .all()
            )
        return pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in v.columns])

    def labelled_frame(self, scenario: str) -> pd.DataFrame:
        """Labels joined with their items (state, mask, history): what training reads."""
        self.create()
        i, lab = self.items, self.labels
        q = (
            sa.select(
                lab.c.item_id,
                lab.c.label,
                lab.c.annotator,
                lab.c.labelled_at,
                i.c.state,
                i.c.candidate_actions,
                i.c.action_mask,
                i.c.history,
                i.c.step,
                i.c.episode_id,
                i.c.trace_id,
                i.c.cluster_id,
            )
            .join(i, i.c.item_id == lab.c.item_id)
            .where(lab.c.scenario == scenario)
            .order_by(lab.c.item_id)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q).mappings().all()
        return pd.DataFrame([dict(r) for r in rows], columns=[c.name for c in q.selected_columns])

    def drop(self) -> None:
        """Drop both tables (tests and tear-down only)."""
        self._md.drop_all(self.engine, checkfirst=True)
        self._ready = False


def _item_row(it: dict[str, Any]) -> dict[str, Any]:
    def js(v: Any) -> str:
        return v if isinstance(v, str) else json.dumps(v, sort_keys=True, default=str)

    return {
        "item_id": it["item_id"],
        "cluster_id": _int(it.get("cluster_id")),
        "cluster_entropy": _float(it.get("cluster_entropy")),
        "norm_entropy": _float(it.get("norm_entropy")),
        "trace_id": it.get("trace_id"),
        "episode_id": it.get("episode_id"),
        "step": _int(it.get("step")),
        "ts": _utc(it.get("ts")),
        "policy_version": it.get("policy_version"),
        "action_taken": it.get("action_taken"),
        "state": js(it["state"]),
        "candidate_actions": js(it["candidate_actions"]),
        "action_mask": it["action_mask"],
        "history": js(it.get("history") or []),
    }


def _int(v: Any) -> int | None:
    return None if v is None or pd.isna(v) else int(v)


def _float(v: Any) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def _unique(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    out = []
    for it in items:
        if it["item_id"] not in seen:
            seen.add(it["item_id"])
            out.append(it)
    return out


def _chunks(ids: Sequence[str]) -> Iterable[list[str]]:
    for i in range(0, len(ids), _CHUNK):
        yield list(ids[i : i + _CHUNK])
