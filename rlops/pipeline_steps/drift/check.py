"""The drift monitor's step: does live traffic still look like the sandbox we train in?

Baseline: traces of the current champion as production serves it (its most likely action, as
the agent SDK's policy client decides; the rule engine while there is none) in the
calibrated sandbox (the pack under its latest calibration, profile ``calibrated``; the pack's
default profile before the first calibration), encoded through the trace contract as live rows
are, written to ``sandbox_traces/<scenario>/<run_key>.parquet``. Target: the live
trace partition of the run key's hour, or with ``drift.window_hours`` the trace-store window of that many
hours ending with the run key (read by DuckDB: only the tested columns, partitions outside the
window skipped). The field-by-field comparison is :func:`run_drift`, its
p-values counting episodes (``drift.cluster``) and, once calibrated, the episodes the sandbox was
fitted to (a fitted baseline carries its own estimation error). The baseline is a function of
the pack, its calibration, the champion version, the reward function and the budget: an hour
whose inputs are those of an earlier one reads that baseline back instead of rolling it again
(``sandbox_traces/<scenario>/by_inputs/<digest>.parquet``). On top
of it, a champion return anomaly is flagged when the live mean episode return falls below the
sandbox's by more than ``drift.anomaly_drop`` of its scale (and ``drift.anomaly_z`` standard errors) and below the
level of the policy's earlier checks, and the next check confirms it stayed down
(:mod:`rlops.pipeline_steps.drift.anomaly`), and outcome drift
(:mod:`rlops.pipeline_steps.drift.outcomes`: live rewards against the sandbox's prediction for the
same states) is tested on the same two samples. A business signal that moved a reward weight since
the champion was trained (:mod:`rlops.pipeline_steps.drift.signal_drift`) is checked even without
live traffic. Any one asks for an emergency retrain.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.common.arguments import MAX_EPISODES, count
from rlops.common.step_result import StepResult
from rlops.data_contracts.contracts import contract_for
from rlops.data_contracts.schema import STATE_PREFIX
from rlops.data_contracts.validation import validate_frame
from rlops.pipeline_steps.drift.anomaly import ReturnAnomaly, check_return_anomaly
from rlops.pipeline_steps.drift.outcomes import outcome_drift_step
from rlops.pipeline_steps.drift.report import run_drift
from rlops.pipeline_steps.drift.request import DriftCheckRequest
from rlops.pipeline_steps.drift.signal_drift import signal_shifts
from rlops.pipeline_steps.drift.slice_counts import drop_slices, merge_slices
from rlops.pipeline_steps.drift.stats import OPERATIONAL_FIELDS, default_fields
from rlops.pipeline_steps.drift.window import BATCH_ROWS, sql_counts, summarise_window, units_in_sql
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.policy_loader import champion_trace_policy
from rlops.pipeline_steps.infra.prefetch import prefetched
from rlops.pipeline_steps.infra.services import StepServices
from rlops.registry.client import CHAMPION, policy_model_name
from rlops.sandbox.profiles import default_profile
from rlops.sandbox.traces import rollout_traces
from rlops.trace_store.outcome_join import JOIN_COLUMNS, EpisodeReturns
from rlops.trace_store.outcome_join import episode_returns as final_returns
from rlops.trace_store.settled import settled_in
from rlops.trace_store.store import join_uri, partition_path

if TYPE_CHECKING:
    from rlops.common.params_drift import DriftParams


def window_uri(ctx: StepServices) -> str:
    """The trace-store partition of the run key's hour."""
    t = ctx.key.start
    return join_uri(ctx.traces.trace_uri, partition_path(scenario=ctx.scenario, date=f"{t:%Y-%m-%d}", hour=t.hour))


def drift_columns(available: list[str], cfg: DriftParams | Mapping[str, Any]) -> list[str]:
    """The trace columns the drift check reads: the tested fields (``drift.fields``, else every
    ``state.*`` column plus the operational ones), the episode (the p-values' unit) and the reward."""
    fields = set(cfg.get("fields") or [])
    wanted = {"episode_id", "reward_total", str(cfg.get("cluster") or "episode_id")}
    if cfg.get("outcome_enabled"):  # outcome drift predicts each live step's reward from its state and action
        wanted |= {"step", "action", "action_mask"}
    return [
        c
        for c in available
        if c in wanted or c in fields or (not fields and (c.startswith(STATE_PREFIX) or c in OPERATIONAL_FIELDS))
    ]


def tested_fields(cfg: DriftParams, baseline: Any, columns: list[str]) -> list[str]:
    """The fields a long window's check tests: ``drift.fields``, else the defaults for the
    baseline and the window's ``columns``."""
    import pandas as pd

    return list(cfg.fields) if cfg.fields is not None else default_fields(baseline, pd.DataFrame(columns=columns))


def target_rows(ctx: StepServices, cfg: DriftParams | Mapping[str, Any]) -> tuple[str, Any]:
    """``(description, rows)`` of the run key's hour partition (an empty frame when there is
    none); a ``drift.window_hours`` window is summarised instead (:func:`summarised_target`)."""
    reader = ctx.traces.reader
    uri = window_uri(ctx)
    return uri, reader.read(uri, columns=drift_columns(reader.columns(uri), cfg))


def episode_returns(df: Any) -> np.ndarray:
    """The summed reward of each episode that has one: an episode no row of which carries a
    ``reward_total`` (an agent whose integration reports no rewards) has no measured return — it
    is left out, never counted as a return of 0."""
    if not len(df) or "reward_total" not in df.columns:
        return np.zeros(0)
    summed = df.groupby("episode_id")["reward_total"].sum(min_count=1)
    return np.asarray(summed.dropna(), dtype=np.float64)


def live_returns(ctx: StepServices, window: tuple[Any, Any]) -> EpisodeReturns | None:
    """The returns of the live episodes that became final from the start of ``window`` to the run
    key's end, with the late outcomes known then joined (:func:`rlops.trace_store.settled.settled_in`:
    the window's own final episodes and the earlier ones whose outcome arrived since), and how many of
    the window's own episodes still await theirs (censored, counted, left out of the mean). None when
    reads of the scenario join no outcome (the pack maps none to reward and none is stored): the rows'
    own rewards are the returns."""
    if not ctx.traces.joins_outcomes(ctx.scenario):
        return None
    own = ctx.traces.returns(ctx.scenario, window, as_of=ctx.key.end)
    final = final_returns(settled_in(ctx.traces, ctx.scenario, window, JOIN_COLUMNS, as_of=ctx.key.end))
    return dataclasses.replace(final, episodes=final.episodes + own.censored, censored=own.censored)


#: What the drift check says in place of a live mean return its rows do not carry.
NO_LIVE_RETURN = (
    "no live return measured: no live row carries a reward_total (an agent traced through an "
    "integration that reports no rewards); the return-anomaly check and outcome drift did not run"
)


def comparable_rows(pack: Any, df: Any) -> Any:
    """Sandbox trace rows encoded as captured live rows are: through the same trace contract
    (e.g. ``error`` becomes "error"/null as on live rows, not True/False), so a column's
    distribution differs only where the worlds differ."""
    return validate_frame(df, contract_for(pack)).accepted.reset_index(drop=True)


def baseline_inputs(
    services: StepServices, pack: Any, profile: str, episodes: int, reward_fn: str, seed: int
) -> tuple[str, str]:
    """Digest of everything the sandbox baseline depends on (the champion read from its alias)."""
    import hashlib
    import json

    champion = services.tracker.get_alias(policy_model_name(services.scenario), CHAMPION) or "rules"
    doc = {
        "scenario": (pack.path / "scenario.yaml").read_text(),
        "calibration": pack.calibration,
        "champion": str(champion),
        "profile": profile,
        "episodes": episodes,
        "reward_fn": reward_fn,
        "reward_sha": pack.reward_fn(reward_fn).version,
        "seed": seed,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:24], str(champion)


def champion_rows(
    services: StepServices, pack: Any, profile: str, episodes: int, reward_fn: str, seed: int
) -> tuple[Any, str]:
    """``(rows, policy version)``: the champion's most likely actions on ``episodes`` episodes of
    ``pack`` in ``profile`` seeded by ``seed`` (the params' ``seed``), encoded as captured live rows are."""
    traced = champion_trace_policy(services, pack, seed, deterministic=True)
    version = traced.version
    rows = rollout_traces(
        pack,
        traced.policy,
        episodes,
        seed=seed,
        profile=profile,
        policy_version=version,
        reward_fn=reward_fn,
    )
    return comparable_rows(pack, rows), version


def sandbox_baseline(
    services: StepServices, pack: Any, profile: str, episodes: int, reward_fn: str, seed: int
) -> tuple[Any, str]:
    """``(rows, policy version)`` of the champion in the calibrated sandbox, scored by the reward
    function labelled ``reward_fn``, rolled out or read back when an earlier check had the same inputs."""
    digest, champion = baseline_inputs(services, pack, profile, episodes, reward_fn, seed)
    cached = services.uri("sandbox_traces", services.scenario, "by_inputs", f"{digest}.parquet")
    if services.storage.exists(cached):
        df = services.storage.read_parquet(cached)
        return df, str(df["policy_version"].iloc[0]) if len(df) else "rules"
    df, version = champion_rows(services, pack, profile, episodes, reward_fn, seed)
    if not services.dry_run and version.rsplit("/", 1)[-1] == champion:  # the champion did not move meanwhile
        services.storage.write_parquet(cached, df)
    return df, version


def baseline_uri(ctx: StepServices) -> str:
    """Where the run key's sandbox baseline is written (the drift report reads it there)."""
    return ctx.uri("sandbox_traces", ctx.scenario, f"{ctx.run_key}.parquet")


def long_window(ctx: StepServices, cfg: DriftParams) -> tuple[str, str, tuple[Any, Any], int] | None:
    """``(description, uri, window, rows)`` of the ``drift.window_hours`` window (None without one)."""
    hours = cfg.window_hours
    if not hours:
        return None
    uri, window = ctx.traces.scenario_uri(ctx.scenario), ctx.key.lookback(float(hours))
    where = f"{uri} [{window[0]:%Y-%m-%dT%H:%M}Z, {window[1]:%Y-%m-%dT%H:%M}Z)"
    return where, uri, window, ctx.traces.reader.count(uri, window)


def summarised_target(
    ctx: StepServices, cfg: DriftParams, uri: str, window: tuple[Any, Any], rows: int, baseline: Any
) -> tuple[Any, Any]:
    """``(summary, outcome rows)`` of a long window: the field tests' counts over every row in one
    streamed pass (:mod:`rlops.pipeline_steps.drift.window`), and for outcome drift the window's
    rows when there are at most ``drift.outcome_max_rows``, else whole episodes drawn by the stable
    hash of their id (``TraceReader.sample_episodes``) leaving about that many."""
    reader = ctx.traces.reader
    columns = drift_columns(reader.columns(uri), cfg)
    fields = tested_fields(cfg, baseline, columns)
    # units and returns by DuckDB's group-by when it can; the field tests' pass then reads the tested
    # fields alone (not the episode ids, nor outcome drift's columns)
    in_sql = sql_counts(reader, columns)
    extra = set() if in_sql else {"episode_id", "reward_total", cfg.cluster}
    summary_columns = [c for c in columns if c in {*fields, *extra}]
    frames = reader.batches(uri, window, summary_columns, batch_rows=BATCH_ROWS)
    summary = summarise_window(
        prefetched(frames),
        baseline,
        fields,
        rows,
        cfg.cluster,
        count_units=(lambda gaps: units_in_sql(reader, uri, window, cfg.cluster, gaps, columns)) if in_sql else None,
    )
    return summary, outcome_rows(ctx, cfg, uri, window, rows)


def outcome_rows(ctx: StepServices, cfg: DriftParams, uri: str, window: tuple[Any, Any], rows: int) -> Any:
    """The long window's rows outcome drift reads: all of them up to ``drift.outcome_max_rows``,
    else whole episodes drawn by the stable hash of their id leaving about that many."""
    import pandas as pd

    if not cfg.outcome_enabled:
        return pd.DataFrame()
    reader = ctx.traces.reader
    columns = drift_columns(reader.columns(uri), cfg)
    return reader.sample_episodes(uri, cfg.outcome_max_rows, window, columns, total=rows)[0]


@dataclass(frozen=True)
class DriftSummary(StepResult):
    """What the drift check of a run key found, and whether it asks for a retrain."""

    scenario: str
    run_key: str
    target_uri: str
    """The live traffic tested (the run key's partition, or the ``drift.window_hours`` window)."""
    dry_run: bool
    signal_shifts: list[dict[str, Any]]
    """Each business signal the reward reads: its value now and at the last training."""
    signal_drift: list[str]
    """The signals that moved, described."""
    drifted_fields: list[str]
    anomaly: bool
    """The live return fell significantly below its level (the return-anomaly check)."""
    retrain: bool
    summary: str
    baseline_uri: str | None = None
    """The sandbox baseline the traffic was compared with (None: no live traffic to compare)."""
    policy_version: str | None = None
    profile: str | None = None
    calibration: str | None = None
    report_uri: str | None = None
    html_uri: str | None = None
    live_mean_return: float | None = None
    """The live episodes' mean return; None (with :attr:`live_return_note`) when no live row has a reward."""
    live_return_note: str | None = None
    sandbox_mean_return: float | None = None
    live_censored_episodes: int | None = None
    """Live episodes still awaiting a late outcome (left out of the mean); None: the pack awaits none."""
    live_outcome_episodes: int | None = None
    """Live episodes whose return includes a late outcome; None: no outcome is joined."""
    anomaly_check: ReturnAnomaly | None = None
    outcome_drift: bool | None = None
    outcome_onset: bool | None = None
    outcome_drifted_cells: list[Any] | None = None
    outcome_summary: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Without a comparison (no live traffic), only the fields that say so."""
        out = super().as_dict()
        if self.anomaly_check is not None:  # the verdict shows only the fields that apply to it
            out["anomaly_check"] = self.anomaly_check.as_dict()
        if self.baseline_uri is None:
            compared = [f.name for f in dataclasses.fields(self)][list(out).index("baseline_uri") :]
            return {k: v for k, v in out.items() if k not in compared}
        return out


def drift_check(
    ctx: StepContext, request: DriftCheckRequest | None = None, slices: list[Any] | None = None
) -> DriftSummary:
    """The drift check of the run key (see the module). ``slices``: a fanned-out check's slices
    (:func:`rlops.pipeline_steps.drift.fan_out.summarise_slice`), counted against the baseline the
    plan froze and added up by :func:`rlops.pipeline_steps.drift.slice_counts.merge_slices`."""
    cfg = ctx.config.drift
    episodes = (request or DriftCheckRequest()).episodes
    if episodes is not None:  # checked before any work: 0 is refused, not read as "params decide"
        episodes = count("--episodes", episodes, maximum=MAX_EPISODES)
    long = long_window(ctx, cfg)
    if long is None:
        target, live = target_rows(ctx, cfg)
        empty = bool(live.empty)
    else:
        target, empty = long[0], long[3] == 0
    pack = ctx.load_pack()  # with the latest calibration: the sandbox as it stands now
    reward_fn = ctx.reward_choice(pack=pack).reward_fn  # once: the signal check and the baseline score with it
    # a business signal moves the reward with or without traffic
    shifts = signal_shifts(ctx, pack, reward_fn, ctx.signal_readings(pack), ctx.config.signals)
    signals_moved = [s.describe() for s in shifts if s.moved]
    base: dict[str, Any] = {
        "scenario": ctx.scenario,
        "run_key": ctx.run_key,
        "target_uri": target,
        "dry_run": ctx.dry_run,
        "signal_shifts": [s.as_dict() for s in shifts],
        "signal_drift": signals_moved,
    }
    if empty:
        return DriftSummary(
            **base,
            drifted_fields=[],
            anomaly=False,
            retrain=bool(signals_moved),
            summary=f"no live traces at {target}; nothing to compare"
            + "".join(f"; {line}: retrain" for line in signals_moved),
        )
    profile = default_profile(pack, "sandbox")
    summary = None
    fanned = [s for s in slices or [] if s] if long is not None else []
    if fanned:
        assert long is not None
        baseline_df = ctx.storage.read_parquet(fanned[0]["baseline_uri"])
        version = str(baseline_df["policy_version"].iloc[0]) if len(baseline_df) else "rules"
        reader = ctx.traces.reader
        columns = drift_columns(reader.columns(long[1]), cfg)
        summary = merge_slices(ctx.storage, reader, fanned, baseline_df, long[1:], cfg.cluster, columns)
        live = outcome_rows(ctx, cfg, long[1], long[2], long[3])
    else:
        baseline_df, version = sandbox_baseline(
            ctx,
            pack,
            profile,
            episodes if episodes is not None else cfg.baseline_episodes,
            reward_fn,
            ctx.config.seed,
        )
    if long is not None and summary is None:
        summary, live = summarised_target(ctx, cfg, long[1], long[2], long[3], baseline_df)
    baseline = baseline_uri(ctx)
    if not ctx.dry_run and not fanned:
        ctx.storage.write_parquet(baseline, baseline_df)
    fit_n = ((pack.calibration or {}).get("fit") or {}).get("episodes")
    # a dry run runs the same tests on the same frames (the baseline in hand, as it is not written)
    # so that its drifted fields and retrain are the real run's; run_drift skips the writes
    result = run_drift(
        ctx.params,
        baseline,
        target,
        ctx.report_uri("drift"),
        dry_run=ctx.dry_run,
        scenario=ctx.scenario,
        ctx=ctx,
        baseline_fit_n=fit_n,
        target_rows=live if summary is None else None,
        target_summary=summary,
        baseline_rows=baseline_df,
    )

    r_live = episode_returns(live) if summary is None else summary.episode_returns
    start = ctx.key.start.replace(minute=0, second=0, microsecond=0)
    joined = live_returns(ctx, long[2] if long is not None else (start, start + timedelta(hours=1)))
    if joined is not None:
        r_live = joined.returns
    r_base = episode_returns(baseline_df)
    drifted = list(result.drifted_fields)
    alarmed_for = f"input drift ({', '.join(drifted[:3])})" if drifted else None
    verdict = check_return_anomaly(ctx, cfg, r_live, r_base, version, alarmed_for)

    window = long[2] if long is not None else (start, start + timedelta(hours=1))
    outcome = outcome_drift_step(ctx, cfg, ctx.config.evaluate.segments or {}, pack, baseline_df, live, window)
    if fanned and not ctx.dry_run:  # last: a failure above leaves the slices for the task's retry
        drop_slices(ctx)
    unmeasured = NO_LIVE_RETURN if not len(r_live) else None
    if joined is not None and joined.censored:
        waiting = f"{joined.censored} live episode(s) await their outcome (censored, left out of the live return)"
        unmeasured = f"no final live return: {waiting}" if not len(r_live) else None
        waiting_note = waiting
    else:
        waiting_note = None
    return DriftSummary(
        **base,
        baseline_uri=baseline,
        policy_version=version,
        profile=profile,
        calibration=(pack.calibration or {}).get("version"),
        drifted_fields=drifted,
        report_uri=None if ctx.dry_run else result.report_uri,
        html_uri=None if ctx.dry_run else result.html_uri,
        summary=(f"{result.summary} (dry run: no report written)" if ctx.dry_run else result.summary)
        + "".join(f"; {line}" for line in signals_moved)
        + (f"; {unmeasured}" if unmeasured else (f"; {waiting_note}" if waiting_note else "")),
        live_mean_return=round(float(r_live.mean()), 4) if len(r_live) else None,
        live_return_note=unmeasured,
        sandbox_mean_return=round(float(r_base.mean()), 4),
        live_censored_episodes=None if joined is None else joined.censored,
        live_outcome_episodes=None if joined is None else joined.joined,
        anomaly=verdict.anomaly,
        anomaly_check=verdict,
        outcome_drift=outcome.drifted,
        outcome_onset=outcome.onset,
        outcome_drifted_cells=outcome.drifted_cells,
        outcome_summary=outcome.summary,
        retrain=bool(drifted) or verdict.anomaly or outcome.onset or bool(signals_moved),
    )
