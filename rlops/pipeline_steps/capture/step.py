"""``rlops capture``: one interval of traces into the validated trace store.

Two sources, one contract:

* **landing zone** (production): the JSON-lines files live agents wrote through
  ``agent_sdk.Tracer`` for the interval are compacted by :func:`capture_landing_zone`;
* **simulation** (no live agent yet, demos, shadow runs) — only when asked (``--simulate``, the
  capture DAG's ``simulate`` conf, or ``capture.simulate_when_empty``): the ``champion`` policy
  (or the pack's rule engine while there is none) runs in a named simulation profile, ``live`` by
  default, and a ``sample_rate`` fraction of its episodes is recorded, as a live sampler would.
  The result records ``source: simulation:<profile>`` (the rows stand in for live traffic, so
  they carry the contract's ``live``/``sandbox`` source); episode ids are
  ``<scenario>-<run key>-<i>``, so they never collide across captures.

Either way every row is validated against the scenario's trace contract (Great Expectations);
rows that break it go to quarantine with their reason, and rows in = accepted + quarantined. More
than ``capture.max_quarantine_share`` of them quarantined fails the capture (exit 2, the DAG task
fails) once its rows are written; an interval without rows is a warning that says where the traffic
is (:mod:`rlops.pipeline_steps.capture.input_checks`).
The interval is the run key's (:class:`~rlops.common.run_key.RunKey`); its files are named after the
run key, so a re-run overwrites them.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from rlops.common.arguments import MAX_EPISODES, count, fraction
from rlops.common.errors import UserError
from rlops.data_contracts.contracts import contract_for
from rlops.data_contracts.validation import REASON_COLUMN
from rlops.pipeline_steps.capture.core import capture_landing_zone, defaulted_notes, validate_rows, write_capture
from rlops.pipeline_steps.capture.exploration import COLUMNS as EXPLORATION_COLUMNS
from rlops.pipeline_steps.capture.exploration import exploration_cost
from rlops.pipeline_steps.capture.fallbacks import check_fallbacks, interval_rows, log_fallbacks
from rlops.pipeline_steps.capture.input_checks import (
    CaptureRejected,
    QuarantineTally,
    empty_interval_warning,
    rejection,
)
from rlops.pipeline_steps.capture.request import CaptureRequest
from rlops.pipeline_steps.capture.summary import CaptureSummary
from rlops.pipeline_steps.capture.trace_sources import mlflow_source, otlp_source
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.datasets import parquet_dataset
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.infra.policy_loader import serving_trace_policy
from rlops.pipeline_steps.infra.services import StepServices
from rlops.registry import tags as T
from rlops.registry.datasets import log_dataset_inputs
from rlops.sandbox.profiles import default_profile
from rlops.sandbox.traces import rollout_traces
from rlops.trace_store.store import (
    episode_prefix,
    write_quarantine_partitions,
    write_trace_partitions,
)

if TYPE_CHECKING:
    from rlops.common.params_model import CaptureParams
    from rlops.common.params_operations import ExplorationParams
    from rlops.sandbox.pack import Pack


def capture_step(ctx: StepContext, request: CaptureRequest | None = None, progress: bool = False) -> CaptureSummary:
    """Capture the run key's interval as ``request`` asks. ``simulate=None`` uses the landing zone
    when it has files for the interval and falls back to simulation when
    ``capture.simulate_when_empty`` is on. ``progress`` draws a bar of the landing-zone rows read
    (a simulation is one batched rollout)."""
    request = request or CaptureRequest()
    simulate, episodes, sample_rate, profile = request.simulate, request.episodes, request.sample_rate, request.profile
    cfg = ctx.config.capture
    # Arguments first (an explicit 0 is an error, never "the default"), then any work.
    n_episodes = count("--episodes", episodes if episodes is not None else cfg.episodes, maximum=MAX_EPISODES)
    rate = fraction("--sample-rate", sample_rate if sample_rate is not None else cfg.sample_rate)
    lateness = count("capture.max_lateness_minutes", cfg.max_lateness_minutes, minimum=0, maximum=7 * 24 * 60)
    pack = ctx.load_pack()
    store = ctx.traces
    landing, traces, quarantine = store.landing_uri, store.trace_uri, store.quarantine_uri
    start, end = ctx.key.start, ctx.key.end
    has_files = bool(store.landing_files(ctx.scenario, ctx.key))
    if simulate is None:  # simulated traffic is never stored as live unless the configuration asks
        simulate = not has_files and cfg.simulate_when_empty
    if not simulate:
        res = capture_landing_zone(
            ctx.storage,
            landing,
            traces,
            ctx.scenario,
            contract_for(pack),
            start,
            end,
            chunk_rows=cfg.chunk_rows,
            dry_run=ctx.dry_run,
            quarantine_root_uri=quarantine,
            run_key=ctx.run_key,
            progress=progress,
            max_lateness=timedelta(minutes=lateness),
        )
        out = CaptureSummary(
            **_interval(ctx),
            source="landing_zone",
            rows_in=res.rows_in,
            rows_accepted=res.rows_accepted,
            rows_quarantined=res.rows_quarantined,
            partitions=res.partitions,
            quarantine_uri=res.quarantine_uri,
            files_skipped=res.files_skipped,
            quarantine_partitions=res.quarantine_partitions,
            quarantine_reasons=res.quarantine_reasons,
            warnings=[
                *(f"landing file not read (expected .jsonl or .jsonl.gz): {u}" for u in res.files_skipped),
                *defaulted_notes(res.defaulted),
            ],
        )
        if res.rows_in == 0:
            note = empty_interval_warning(ctx.storage, landing, ctx.scenario, ctx.key, res.files_read)
            out = dataclasses.replace(out, warnings=[*out.warnings, note])
    else:
        world = default_profile(pack, "production", profile or cfg.profile)
        reward_fn = ctx.reward_choice(pack=pack).reward_fn
        out = simulate_capture(
            ctx, pack, traces, quarantine, start, n_episodes, rate, world, reward_fn, ctx.config.exploration
        )
    return _checked_and_tracked(ctx, cfg, out)


def _interval(ctx: StepServices) -> dict[str, Any]:
    """The fields every capture summary starts with: what was captured, and whether for real."""
    interval = [ctx.key.start.isoformat(), ctx.key.end.isoformat()]
    return {"scenario": ctx.scenario, "run_key": ctx.run_key, "interval": interval, "dry_run": ctx.dry_run}


def _checked_and_tracked(services: StepServices, cfg: CaptureParams, out: CaptureSummary) -> CaptureSummary:
    """``out`` with the live fallback share of its rows (over the threshold: an incident), tracked
    as the pass's capture run unless the run is dry or ``capture.track`` is off (``cfg``: the params'
    ``capture:`` block). Raises :class:`CaptureRejected` when more of its rows were quarantined than
    ``capture.max_quarantine_share`` — after the rows are written and the run tracked, so the
    failure loses nothing."""
    fallbacks, alerts = check_fallbacks(services, cfg, out.partitions)
    explored: dict[str, Any] | str = "not measured: a dry run writes no partitions"
    if not services.dry_run:
        cost = exploration_cost(interval_rows(services, out.partitions, EXPLORATION_COLUMNS))
        explored = cost.to_dict() if cost is not None else "not measured: no row says whether its decision explored"
    out = dataclasses.replace(out, fallbacks=fallbacks, alerts=[*out.alerts, *alerts], exploration=explored)
    rejected = rejection(out, cfg.max_quarantine_share)
    if not services.dry_run and cfg.track:
        track_capture(services, out, rejected)
    if rejected:
        raise CaptureRejected(rejected, out)
    return out


def capture_traces(ctx: StepContext, otlp_uri: str | None = None, progress: bool = False) -> CaptureSummary:
    """Capture the interval's agent decisions from MLflow's trace store, or from an OTLP/JSON export
    file, through the landing zone's writer: the same contract, interval and duplicate checks,
    quarantine and manifest (each source of a run key adds its own files; see
    :mod:`rlops.pipeline_steps.capture.core`)."""
    cfg = ctx.config.capture
    lateness = count("capture.max_lateness_minutes", cfg.max_lateness_minutes, minimum=0, maximum=7 * 24 * 60)
    start, end = ctx.key.start, ctx.key.end
    if otlp_uri:
        source = otlp_source(ctx.storage, otlp_uri)
    else:
        experiment = cfg.mlflow_experiment or ctx.scenario
        source = mlflow_source(ctx.tracker.tracking_uri, experiment, start, end)
    store = ctx.traces
    res = write_capture(
        ctx.storage,
        source,
        store.trace_uri,
        ctx.scenario,
        contract_for(ctx.load_pack()),
        start,
        end,
        chunk_rows=cfg.chunk_rows,
        dry_run=ctx.dry_run,
        quarantine_root_uri=store.quarantine_uri,
        run_key=ctx.run_key,
        progress=progress,
        max_lateness=timedelta(minutes=lateness),
        landing_uri=store.landing_uri,
    )
    out = CaptureSummary(
        **_interval(ctx),
        source=res.source,
        rows_in=res.rows_in,
        rows_accepted=res.rows_accepted,
        rows_quarantined=res.rows_quarantined,
        spans_skipped=res.spans_skipped,
        partitions=res.partitions,
        quarantine_partitions=res.quarantine_partitions,
        quarantine_uri=res.quarantine_uri,
        quarantine_reasons=res.quarantine_reasons,
        manifest_uri=res.manifest_uri,
        warnings=defaulted_notes(res.defaulted),
    )
    if res.rows_in == 0:
        interval = f"[{ctx.key.start.isoformat()}, {ctx.key.end.isoformat()})"
        note = f"no rows in: {res.source} holds no agent decisions of {ctx.scenario} for the interval {interval}"
        out = dataclasses.replace(out, warnings=[*out.warnings, note])
    return _checked_and_tracked(ctx, cfg, out)


def track_capture(ctx: StepServices, out: CaptureSummary, rejected: str | None = None) -> None:
    """The capture's step run in the pass: row counts, and the partitions it wrote as datasets;
    ``rejected``: why the capture fails (too much quarantined), as a tag."""
    with step_run(ctx, T.CAPTURE) as run:
        run.log_params({"source": out.source, "interval": " .. ".join(out.interval)})
        counts = {"rows_in": out.rows_in, "rows_accepted": out.rows_accepted, "rows_quarantined": out.rows_quarantined}
        run.log_metrics({k: float(v) for k, v in counts.items()}, step=0)
        if rejected:
            run.set_tags({T.ALERT_QUARANTINE: rejected[:5000]})
        log_fallbacks(run, out.fallbacks, out.alerts)
        if isinstance(out.exploration, dict):
            cost = out.exploration
            run.log_metrics(
                {
                    f"exploration_{k}": float(cost[k])
                    for k in ("explored_share", "cost_share", "return_all", "return_chosen")
                    if isinstance(cost.get(k), (int, float))
                },
                step=0,
            )
        parts = out.partitions[:50]  # a bound on what one run lists as inputs
        log_dataset_inputs(run, [parquet_dataset(ctx.storage, p, f"traces-{ctx.scenario}") for p in parts], "captured")


def simulate_capture(
    services: StepServices,
    pack: Pack,
    traces: str,
    quarantine: str,
    start: datetime,
    episodes: int,
    sample_rate: float,
    profile: str,
    reward_fn: str,
    exploration: ExplorationParams,
) -> CaptureSummary:
    """``episodes`` of the serving policy (``exploration``: the params' ``exploration:`` block) in
    ``profile``, their rows scored by the reward function labelled ``reward_fn`` and a ``sample_rate``
    fraction of them validated and written for the interval starting at ``start``."""
    if profile not in pack.scenario.profiles:
        raise UserError(
            f"capture --profile {profile!r}: pack {pack.name} has no such profile; "
            f"expected one of {sorted(pack.scenario.profiles)}"
        )

    # Seed and ids derive from the run key: each interval sees other applicants, ids never collide
    # across run keys, and re-running a run key reproduces its rows.
    seed = int(start.timestamp()) // 60 * 1000
    traced = serving_trace_policy(services, pack, seed, exploration)
    policy, version = traced.policy, traced.version
    df = rollout_traces(
        pack,
        policy,
        episodes,
        seed=seed,
        profile=profile,
        reward_fn=reward_fn,
        policy_version=version,
        source="live" if profile == "live" else "sandbox",
        start_ts=start,
        sample_rate=sample_rate,
        episode_prefix=episode_prefix(services.scenario, services.run_key),
    )
    contract = contract_for(pack)
    accepted, quarantined = validate_rows(df, contract)
    tally = QuarantineTally()
    tally.add(quarantined[REASON_COLUMN].tolist() if len(quarantined) else [])
    parts = write_trace_partitions(
        services.storage, accepted, traces, services.run_key, contract=contract, dry_run=services.dry_run
    )
    qparts = (
        write_quarantine_partitions(
            services.storage,
            quarantined,
            quarantine,
            services.scenario,
            services.run_key,
            fallback_ts=start,
            dry_run=services.dry_run,
        )
        if len(quarantined)
        else []
    )
    return CaptureSummary(
        **_interval(services),
        source=f"simulation:{profile}",
        policy_version=version,
        episodes=episodes,
        sample_rate=sample_rate,
        rows_in=len(df),
        rows_accepted=len(accepted),
        rows_quarantined=len(quarantined),
        partitions=parts,
        quarantine_partitions=qparts,
        quarantine_reasons=tally.to_list(),
        warnings=[traced.warning] if traced.warning else [],
    )
