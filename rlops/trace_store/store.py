"""The trace store: where trace rows live, how they are laid out, written and read. One home.

Layout (every URI may be local ``file://`` or ``s3://``; see :mod:`rlops.storage.backend`)::

    <landing>/scenario=<s>/date=YYYY-MM-DD/hour=HH/<YYYYmmddTHHMMSSffffff>Z-<host>-<pid>-<seq>.jsonl
    <traces>/scenario=<s>/date=YYYY-MM-DD/hour=HH/part-<run_key>-NNNNN.parquet
    <traces>/_manifests/scenario=<s>/<run_key>.json
    <quarantine>/scenario=<s>/date=YYYY-MM-DD/hour=HH/part-<run_key>-NNNNN.parquet

Rows are partitioned by the UTC date and hour of their ``ts``; a file is named after the run key
that wrote it, so re-running a run key overwrites instead of duplicating. A landing file belongs to
the interval that holds the UTC time at the front of its name (its hour folder's start otherwise).

Every parquet file carries bloom filters on ``trace_id`` and ``episode_id`` (:func:`parquet_options`),
so a lookup by id reads only the row groups that may hold it. Reads go through
:class:`~rlops.trace_store.query.TraceReader` (DuckDB over these partitions).

Ids: an episode id is ``<scenario>-<run_key>-<n>`` for simulated traffic (unique across run keys,
the same on a re-run), a trace id ``<episode_id>-<step>``; live agents bring their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from rlops.common.params_model import CaptureParams
from rlops.common.params_sources import params_block
from rlops.common.run_key import RunKey
from rlops.data_contracts.records import QUARANTINE_SCHEMA, quarantine_frame
from rlops.data_contracts.schema import META_PREFIX, Contract
from rlops.storage.backend import Storage
from rlops.trace_store.engine import QueryEngineConfig
from rlops.trace_store.outcome_join import JOIN_COLUMNS, EpisodeReturns, episode_returns, join_outcomes
from rlops.trace_store.outcomes import OutcomeRules, OutcomeStore
from rlops.trace_store.query import TraceReader

if TYPE_CHECKING:
    from collections.abc import Mapping

    from rlops.common.params_model import CaptureParams, Params
    from rlops.storage.backend import Storage

LANDING_DIR = "landing"
TRACE_DIR = "traces"
QUARANTINE_DIR = "quarantine"
MANIFEST_DIR = "_manifests"
_NAME_TIME = re.compile(r"^(\d{8}T\d{12})Z")
#: Landing files rlops reads: JSON lines, plain or gzip-compressed, any letter case.
LANDING_SUFFIXES = (".jsonl", ".jsonl.gz")
#: Columns whose parquet bloom filters make a lookup by id skip the row groups without it.
BLOOM_COLUMNS = ("trace_id", "episode_id")


@dataclass(frozen=True)
class TraceStore:
    """The three roots of the trace store on one :class:`Storage`, and how it is read."""

    storage: Storage
    landing_uri: str
    trace_uri: str
    quarantine_uri: str
    engine: QueryEngineConfig = QueryEngineConfig()
    outcomes: OutcomeStore | None = None
    """Late outcomes joined into the rows :meth:`read` returns (None: a capture block alone names none)."""

    @classmethod
    def from_params(
        cls, params: Params | CaptureParams | Mapping[str, Any], storage: Storage | None = None
    ) -> TraceStore:
        """Roots from the typed ``capture`` block (or the params document holding it): folders
        under ``storage.root``, or full URIs when they contain ``://``. Without ``storage``, the
        document's own storage block is used."""
        cfg: CaptureParams = params_block(params, "capture")
        if storage is None:
            if isinstance(params, CaptureParams):
                raise TypeError("TraceStore.from_params: a capture block alone names no storage; pass storage=")
            storage = Storage.from_params(params)

        def where(value: str) -> str:
            return value if "://" in value else storage.join(value)

        return cls(
            storage,
            where(cfg.landing_dir),
            where(cfg.trace_dir),
            where(cfg.quarantine_dir),
            QueryEngineConfig.from_params(params),
            None if isinstance(params, CaptureParams) else OutcomeStore.from_params(params, storage),
        )

    @property
    def reader(self) -> TraceReader:
        """Reads of this store (DuckDB, or pandas with ``trace_store.engine: pandas``)."""
        return TraceReader(self.storage, self.engine)

    def scenario_uri(self, scenario: str) -> str:
        """The scenario's folder of accepted rows (``traces/scenario=<s>``)."""
        return join_uri(self.trace_uri, partition_path(scenario=scenario))

    def manifest_uri(self, scenario: str, run_key: str) -> str:
        return join_uri(self.trace_uri, MANIFEST_DIR, f"scenario={scenario}", f"{run_key}.json")

    def landing_files(self, scenario: str, key: RunKey) -> list[str]:
        return landing_files(self.storage, self.landing_uri, scenario, key.start, key.end)

    def read(
        self,
        scenario: str,
        window: tuple[datetime, datetime] | None = None,
        columns: Sequence[str] | None = None,
        as_of: datetime | None = None,
    ) -> pd.DataFrame:
        """Rows of ``scenario`` in ``window`` (only ``columns``), with the late outcomes known at
        ``as_of`` (default: now) joined into ``reward_total`` when the pack maps outcomes to reward or
        any are stored (:mod:`rlops.trace_store.outcome_join`: columns ``outcome_reward`` and
        ``outcome_status`` added)."""
        if not self.joins_outcomes(scenario) or (columns is not None and "episode_id" not in columns):
            return self.reader.read(self.scenario_uri(scenario), window, columns)
        wanted = None if columns is None else [*columns, *(c for c in JOIN_COLUMNS if c not in columns)]
        rows = self.reader.read(self.scenario_uri(scenario), window, wanted)
        joined = self.join_outcomes(scenario, rows, as_of)
        if columns is None:
            return joined
        return joined[[c for c in (*columns, "outcome_reward", "outcome_status") if c in joined.columns]]

    def joins_outcomes(self, scenario: str) -> bool:
        """Whether reads of ``scenario`` join outcomes: the pack maps some to reward, or some are stored."""
        return self.outcomes is not None and (bool(self.outcomes.rules.rewards) or self.outcomes.has_any(scenario))

    def join_outcomes(self, scenario: str, rows: pd.DataFrame, as_of: datetime | None = None) -> pd.DataFrame:
        """``rows`` of ``scenario`` with the outcomes of their decision days joined (see :meth:`read`)."""
        if self.outcomes is None or rows.empty or "episode_id" not in rows.columns:
            return rows
        days = None
        if "ts" in rows.columns:
            ts = pd.to_datetime(rows["ts"], utc=True, errors="coerce", format="ISO8601").dropna()
            if len(ts):
                days = pd.date_range(ts.min().normalize(), ts.max().normalize(), freq="D").date
        stored = self.outcomes.read(scenario, days)
        return join_outcomes(rows, stored, self.outcomes.rules, as_of or datetime.now(UTC))

    def returns(
        self, scenario: str, window: tuple[datetime, datetime] | None = None, as_of: datetime | None = None
    ) -> EpisodeReturns:
        """Episode returns of ``scenario`` in ``window`` with outcomes joined, and how many episodes
        are censored (awaiting an outcome: left out of the returns) or closed without one."""
        rows = self.reader.read(self.scenario_uri(scenario), window, list(JOIN_COLUMNS))
        if self.outcomes is None:
            return episode_returns(join_outcomes(rows, pd.DataFrame(), OutcomeRules(), as_of or datetime.now(UTC)))
        return episode_returns(self.join_outcomes(scenario, rows, as_of))


def episode_prefix(scenario: str, run_key: str) -> str:
    """The prefix of the episode ids simulated traffic gets in one run key: unique across run
    keys, identical when the run key is re-run."""
    return f"{scenario}-{run_key}"


def trace_id(episode_id: str, step: int) -> str:
    return f"{episode_id}-{step}"


def partition_path(**keys: Any) -> str:
    """Hive-style partition path: ``partition_path(scenario="a", date="2026-01-01", hour=3)``
    → ``"scenario=a/date=2026-01-01/hour=03"`` (hours zero-padded so they sort)."""
    parts = []
    for name, value in keys.items():
        text = f"{value:02d}" if name == "hour" and isinstance(value, int) else str(value)
        if "/" in text or not text:
            raise ValueError(f"partition value {name}={value!r} must be non-empty and contain no '/'")
        parts.append(f"{name}={text}")
    return "/".join(parts)


def join_uri(base: str, *parts: str) -> str:
    """``base`` (any storage URI) with ``parts`` appended; :meth:`Storage.join` only joins
    under the storage root, and the landing zone and trace store may live elsewhere."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


def default_quarantine_root(trace_root_uri: str) -> str:
    """``quarantine/`` next to the trace root (``…/traces`` → ``…/quarantine``)."""
    parent = trace_root_uri.rstrip("/").rsplit("/", 1)[0]
    return join_uri(parent, QUARANTINE_DIR)


def file_time(uri: str, hour_start: datetime) -> datetime:
    """The write time a landing file's name carries (its hour folder's start otherwise)."""
    m = _NAME_TIME.match(uri.rsplit("/", 1)[-1])
    if not m:
        return hour_start
    return datetime.strptime(m.group(1), "%Y%m%dT%H%M%S%f").replace(tzinfo=UTC)


def partition_groups(df: pd.DataFrame, ts: pd.Series) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """Split ``df`` by the UTC date and hour of ``ts`` (aligned with ``df``)."""
    keys = pd.DataFrame({"date": ts.dt.strftime("%Y-%m-%d"), "hour": ts.dt.strftime("%H")}, index=df.index)
    for (date, hour), idx in keys.groupby(["date", "hour"], sort=True).groups.items():
        yield str(date), str(hour), df.loc[idx]


#: Rows per parquet row group: the unit a lookup by id decodes (and DuckDB's unit of parallel work).
ROW_GROUP_ROWS = 65_536


def parquet_options(num_rows: int) -> dict[str, Any]:
    """``pyarrow.parquet.write_table`` options of a trace file of ``num_rows`` rows: zstd, row groups
    of :data:`ROW_GROUP_ROWS`, and per row group bloom filters on the id columns (1 % false
    positives), so a lookup by trace or episode id decodes only the row groups that may hold it."""
    ndv = max(min(int(num_rows), ROW_GROUP_ROWS), 1)
    return {
        "compression": "zstd",
        "row_group_size": ROW_GROUP_ROWS,
        "bloom_filter_options": {c: {"ndv": ndv, "fpp": 0.01} for c in BLOOM_COLUMNS},
    }


def _part_name(run_key: str, part: int) -> str:
    return f"part-{run_key}-{part:05d}.parquet"


def write_trace_partitions(
    storage: Storage,
    df: pd.DataFrame,
    trace_root_uri: str,
    run_key: str,
    *,
    contract: Contract | None = None,
    part: int = 0,
    dry_run: bool = False,
) -> list[str]:
    """Write accepted trace rows to ``scenario=/date=/hour=`` partitions under
    ``trace_root_uri``, one file per partition named ``part-<run_key>-<part>.parquet``.

    ``df`` holds typed rows (as :func:`validate_rows` returns them); with ``contract`` the
    file gets exactly the contract's schema. Returns the file URIs (planned ones when
    ``dry_run``)."""
    if df.empty:
        return []
    for col in ("scenario", "ts"):
        if col not in df:
            raise ValueError(
                f"write_trace_partitions: rows lack the {col!r} column needed to "
                "partition them; pass validated trace rows"
            )
    schema = contract.arrow_schema() if contract is not None else None
    columns = (
        contract.column_names if contract is not None else [c for c in df.columns if not str(c).startswith(META_PREFIX)]
    )
    written = []
    for scenario, rows in df.groupby("scenario", sort=True):
        for date, hour, group in partition_groups(rows, pd.to_datetime(rows["ts"], utc=True)):
            uri = join_uri(
                trace_root_uri, partition_path(scenario=scenario, date=date, hour=hour), _part_name(run_key, part)
            )
            if not dry_run:
                table = pa.Table.from_pandas(group[columns], schema=schema, preserve_index=False)
                storage.write_parquet(uri, table, **parquet_options(table.num_rows))
            written.append(uri)
    return written


def write_quarantine_partitions(
    storage: Storage,
    quarantined: pd.DataFrame,
    quarantine_root_uri: str,
    scenario: str,
    run_key: str,
    *,
    fallback_ts: datetime,
    part: int = 0,
    dry_run: bool = False,
    window: tuple[datetime, datetime] | None = None,
) -> list[str]:
    """Write quarantined rows (input rows + ``quarantine_reason``) to
    ``<quarantine_root>/scenario=/date=/hour=`` partitions; rows whose ``ts`` is unreadable (or
    outside ``window``, so a bogus year never names a folder) go to the partition of
    ``fallback_ts``. Returns the file URIs."""
    if quarantined.empty:
        return []
    frame = quarantine_frame(quarantined, scenario)
    ts = frame["ts"]
    if window is not None:
        ts = ts.where((ts >= pd.Timestamp(window[0])) & (ts < pd.Timestamp(window[1])))
    ts = ts.fillna(pd.Timestamp(fallback_ts)).dt.as_unit("us")
    written = []
    for date, hour, group in partition_groups(frame, ts):
        uri = join_uri(
            quarantine_root_uri, partition_path(scenario=scenario, date=date, hour=hour), _part_name(run_key, part)
        )
        if not dry_run:
            table = pa.Table.from_pandas(group, schema=QUARANTINE_SCHEMA, preserve_index=False)
            storage.write_parquet(uri, table)
        written.append(uri)
    return written


def scan_landing(
    storage: Storage, landing_uri: str, scenario: str, start: datetime, end: datetime
) -> tuple[list[str], list[str]]:
    """``(files, skipped)`` of ``scenario`` written in ``[start, end)``, both sorted: ``files``
    are the JSON-lines files, ``*.jsonl`` and ``*.jsonl.gz`` in any letter case; ``skipped``
    every other visible file there, for the caller to report (nothing is skipped silently)."""
    files: list[str] = []
    skipped: list[str] = []
    for hour in RunKey.covering(start, end).hours():
        folder = join_uri(landing_uri, partition_path(scenario=scenario, date=f"{hour:%Y-%m-%d}", hour=hour.hour))
        for uri in storage.list(folder):
            name = uri.rsplit("/", 1)[-1]
            if name.startswith(".") or not start <= file_time(uri, hour) < end:
                continue
            (files if name.lower().endswith(LANDING_SUFFIXES) else skipped).append(uri)
    return sorted(files), sorted(skipped)


def landing_files(storage: Storage, landing_uri: str, scenario: str, start: datetime, end: datetime) -> list[str]:
    """The landing-zone JSON-lines files of ``scenario`` written in ``[start, end)``, sorted
    (see :func:`scan_landing`)."""
    return scan_landing(storage, landing_uri, scenario, start, end)[0]


def read_traces(
    storage: Storage,
    uri: str,
    window: tuple[datetime, datetime] | None = None,
    columns: Sequence[str] | None = None,
    engine: QueryEngineConfig | None = None,
) -> pd.DataFrame:
    """Trace rows from one parquet file or every ``*.parquet`` under a folder (``quarantine``
    partitions excluded). With ``window``, hour partitions outside it are skipped and rows are
    kept when ``window[0] <= ts < window[1]``. Read by :class:`TraceReader` (``engine``: the
    ``trace_store`` block of params; DuckDB by default)."""
    return TraceReader(storage, engine).read(uri, window, columns)
