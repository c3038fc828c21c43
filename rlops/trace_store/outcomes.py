"""The outcome store: late business outcomes of captured episodes, one row per (episode, kind, name).

Layout (beside the trace store, on the same storage)::

    <landing>/_outcomes/scenario=<s>/date=YYYY-MM-DD/hour=HH/<time>Z-<host>-<pid>-<seq>.jsonl   (Tracer.outcome)
    <outcomes>/scenario=<s>/date=<decision date>/outcomes.parquet
    <outcome_quarantine>/scenario=<s>/<batch>.parquet

A row is partitioned by the UTC date of its episode's last decision (``decision_ts``), so a read of a
trace window opens only the outcome partitions of the days it covers. A write replaces a row only
when its value or time changed, and rewrites only the partitions that changed: importing the same
file twice changes nothing. How outcomes become returns is :mod:`rlops.trace_store.outcome_join`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from rlops.common.params_operations import OutcomesParams
from rlops.common.params_sources import params_block

if TYPE_CHECKING:
    from rlops.common.params_model import Params
    from rlops.storage.backend import Storage

#: The folder under the landing root where the Tracer writes outcome lines (not a scenario partition).
OUTCOME_LANDING = "_outcomes"
#: Columns that identify one stored outcome.
KEY = ["episode_id", "kind", "name"]
STORE_SCHEMA = pa.schema(
    [
        pa.field("scenario", pa.string(), nullable=False),
        pa.field("episode_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("decision_ts", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("source_uri", pa.string()),
    ]
)
QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("episode_id", pa.string()),
        pa.field("ts", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("raw", pa.string(), nullable=False),
        pa.field("source_uri", pa.string()),
        pa.field("line_no", pa.int64()),
    ]
)
_PARTITION_FILE = "outcomes.parquet"


@dataclass(frozen=True)
class OutcomeRules:
    """How outcomes turn into reward and when an episode is still waiting for one (params ``outcomes``)."""

    max_delay: timedelta = timedelta(days=180)
    rewards: Mapping[str, tuple[str, float]] = field(default_factory=dict)
    """Outcome value name → (reward component, weight)."""
    awaited_actions: frozenset[str] | None = None
    """Last actions of the episodes that await an outcome (None: every episode, once rewards are declared)."""

    @classmethod
    def from_params(cls, params: Params | OutcomesParams | Mapping[str, Any]) -> OutcomeRules:
        cfg: OutcomesParams = params_block(params, "outcomes")
        return cls(
            timedelta(days=cfg.max_delay_days),
            {name: (r.component, float(r.weight)) for name, r in cfg.rewards.items()},
            None if cfg.awaited_actions is None else frozenset(cfg.awaited_actions),
        )


@dataclass(frozen=True)
class StoreWrite:
    """What an upsert did: values added, left as they were, replaced (old → new), and the partitions written."""

    added: int
    unchanged: int
    replaced: int
    replacements: list[dict[str, Any]]
    """The first replaced values: episode, kind, name, old and new value and time."""
    partitions: list[str]


@dataclass(frozen=True)
class OutcomeStore:
    """The outcome store of one storage (roots as full URIs) and its rules."""

    storage: Storage
    root_uri: str
    quarantine_uri: str
    rules: OutcomeRules = OutcomeRules()

    @classmethod
    def from_params(cls, params: Params | Mapping[str, Any], storage: Storage) -> OutcomeStore:
        cfg: OutcomesParams = params_block(params, "outcomes")

        def where(value: str) -> str:
            return value if "://" in value else storage.join(value)

        return cls(storage, where(cfg.dir), where(cfg.quarantine_dir), OutcomeRules.from_params(cfg))

    def scenario_uri(self, scenario: str) -> str:
        return f"{self.root_uri.rstrip('/')}/scenario={scenario}"

    def partition_uri(self, scenario: str, day: date) -> str:
        return f"{self.scenario_uri(scenario)}/date={day:%Y-%m-%d}/{_PARTITION_FILE}"

    def has_any(self, scenario: str) -> bool:
        """Whether any outcome of ``scenario`` is stored (reads join outcomes only then, or with rules)."""
        return bool(self.storage.list(self.scenario_uri(scenario), suffix=".parquet"))

    def read(self, scenario: str, days: Iterable[date] | None = None) -> pd.DataFrame:
        """Stored outcomes of ``scenario`` whose decision fell on ``days`` (every day when None)."""
        if days is None:
            uris = sorted(self.storage.list(self.scenario_uri(scenario), suffix=".parquet"))
        else:
            uris = [u for d in sorted(set(days)) if self.storage.exists(u := self.partition_uri(scenario, d))]
        frames = [self.storage.read_parquet(u) for u in uris]
        if not frames:
            return STORE_SCHEMA.empty_table().to_pandas()
        return pd.concat(frames, ignore_index=True)

    def upsert(self, scenario: str, rows: pd.DataFrame, dry_run: bool = False, shown: int = 20) -> StoreWrite:
        """Merge ``rows`` (:data:`STORE_SCHEMA` columns, at most one row per key) into the store: a
        new key is added, a key whose value and time are the same is left alone, any other replaces
        the stored row. Only partitions with an addition or replacement are written."""
        added = unchanged = replaced = 0
        replacements: list[dict[str, Any]] = []
        written: list[str] = []
        days = rows["decision_ts"].dt.date
        for day, new in rows.groupby(days, sort=True):
            uri = self.partition_uri(scenario, day)
            old = self.storage.read_parquet(uri) if self.storage.exists(uri) else STORE_SCHEMA.empty_table().to_pandas()
            merged = new.merge(old[[*KEY, "value", "ts"]], on=KEY, how="left", suffixes=("", "_old"), indicator=True)
            fresh = merged["_merge"] == "left_only"
            same = ~fresh & (merged["value"] == merged["value_old"]) & (merged["ts"] == merged["ts_old"])
            changed = ~fresh & ~same
            added, unchanged = added + int(fresh.sum()), unchanged + int(same.sum())
            replaced += int(changed.sum())
            for r in merged[changed].head(max(shown - len(replacements), 0)).itertuples(index=False):
                replacements.append(
                    {
                        "episode_id": r.episode_id,
                        "kind": r.kind,
                        "name": r.name,
                        "old_value": float(r.value_old),
                        "new_value": float(r.value),
                        "old_ts": r.ts_old.isoformat(),
                        "new_ts": r.ts.isoformat(),
                    }
                )
            if not (fresh.any() or changed.any()):
                continue
            keep = new[(fresh | changed).to_numpy()]
            stale = old.merge(keep[KEY], on=KEY, how="left", indicator=True)["_merge"] == "left_only"
            out = pd.concat([old.loc[stale.to_numpy(), STORE_SCHEMA.names], keep[STORE_SCHEMA.names]])
            out = out.sort_values(KEY, kind="stable").reset_index(drop=True)
            if not dry_run:
                table = pa.Table.from_pandas(out[STORE_SCHEMA.names], schema=STORE_SCHEMA, preserve_index=False)
                self.storage.write_parquet(uri, table)
            written.append(uri)
        return StoreWrite(added, unchanged, replaced, replacements, written)

    def quarantine_file(self, scenario: str, batch: str) -> str:
        return f"{self.quarantine_uri.rstrip('/')}/scenario={scenario}/{batch}.parquet"

    def write_quarantine(self, scenario: str, batch: str, frame: pd.DataFrame, dry_run: bool = False) -> str | None:
        """Quarantined records of one batch (a re-run of the batch replaces its file); None when there are none."""
        if frame.empty:
            return None
        uri = self.quarantine_file(scenario, batch)
        if not dry_run:
            table = pa.Table.from_pandas(frame[QUARANTINE_SCHEMA.names], schema=QUARANTINE_SCHEMA, preserve_index=False)
            self.storage.write_parquet(uri, table)
        return uri


__all__ = ["KEY", "OUTCOME_LANDING", "STORE_SCHEMA", "OutcomeRules", "OutcomeStore", "StoreWrite"]
