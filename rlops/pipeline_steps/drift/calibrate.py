"""``rlops calibrate --traces URI``: make the sandbox look like live traffic.

Fields
    Every observed field whose initial distribution has constant parameters is refitted by
    maximum likelihood within its declared family: normal → mean/std, lognormal → mean/sigma of
    the log, uniform → min/max, categorical → frequencies, bernoulli → rate. The values are the
    fields' *initial* values: step-0 rows of live episodes for fields an action can change, and
    the first row where the field is visible for fields no action changes (the credit score only
    appears once the report is fetched, but it never changes). Fields with fewer than
    ``min_rows`` values keep their declared distribution (reported as skipped).

Simulation
    Latency jitter: the residual ``latency_ms − declared mean latency of the action`` has mean
    ``(lo + hi) / 2`` and variance ``(hi − lo)² / 12 + E[declared std²]``; solving these two
    moment equations gives the jitter range. Per-API error rates: for the rows of actions
    calling an API, ``1 − (1 − observed rate) / (1 − the actions' own error rate)``.

Output
    ``calibrations/<scenario>/<version>.json`` (version = run key; a re-run overwrites it) and
    ``latest.json``. A calibration writes one profile only, ``calibrated`` (replacing an earlier
    one): the fitted simulation, based on the pack's default profile, and the fitted field
    distributions as its population. When live traffic is a mixture of populations (a Gaussian
    mixture of the episodes' initial values, its number of components chosen by BIC, see
    :mod:`rlops.pipeline_steps.drift.mixture`), the population is one segment per component, each
    with the fields refitted on its episodes (``population`` in the calibration); otherwise it is
    one segment of probability 1 holding the per-field fits (``fields``).
    Every other profile, above all the production stand-in ``live``, is left as declared, so
    re-running a run key on the same traces writes the same calibration. Train with
    ``profile="calibrated"``. The calibration also records the fit and a check: KS statistics
    (total-variation distance for categorical fields) of sandbox initial states against live
    before and after; a field whose fit matches live worse than the current sandbox (by more than
    ``worse_tolerance``) is refused and listed under ``rejected``, and every field not fitted is
    listed under ``skipped`` with the reason.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rlops.common.params_drift import RecalConfig  # the typed ``recalibrate:`` params block
from rlops.common.step_result import StepResult
from rlops.pipeline_steps.drift.calibration_fit import PROFILE, CalibrationFit, FieldFit, RewardScales
from rlops.pipeline_steps.drift.check import champion_rows
from rlops.pipeline_steps.drift.field_fits import (
    changed_by_actions,
    declared,
    fit_field,
    fittable,
    initial_series,
    initial_values,
    unfittable_reason,
)
from rlops.pipeline_steps.drift.mixture import drop_fields, fit_mixture, mixture_features, segment_population
from rlops.pipeline_steps.drift.outcome_fit import fit_outcomes, fit_reward_scales, outcome_components
from rlops.pipeline_steps.infra.datasets import CALIBRATION, parquet_dataset
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.registry import tags as T
from rlops.registry.datasets import log_dataset_inputs
from rlops.sandbox.pack import load_pack
from rlops.sandbox.profiles import default_profile
from rlops.trace_store.outcome_join import settled
from rlops.trace_store.settled import settled_in
from rlops.trace_store.states import action_codes, error_flags

if TYPE_CHECKING:  # numpy, pandas and torch are imported where they run: registering the CLI stays light
    import numpy as np
    import pandas as pd

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack


# --------------------------------------------------------------------------- simulation fits
def fit_simulation(pack: Pack, df: pd.DataFrame, min_rows: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(profile, fit details)``: the ``calibrated`` profile and what it was fitted from."""
    import numpy as np
    import pandas as pd

    spec = pack.scenario.spec
    base = spec.profiles[spec.default_profile]
    codes = action_codes(pack, df["action"])
    latency = (
        pd.to_numeric(df.get("latency_ms"), errors="coerce").to_numpy(np.float64)
        if "latency_ms" in df.columns
        else np.full(len(df), np.nan)
    )
    jitter, own_latency, details = fit_latency(pack, codes, latency, min_rows)
    err = error_flags(df["error"]) if "error" in df.columns else np.zeros(len(df), dtype=bool)
    own_rate = np.array([a.error_rate for a in spec.actions])[codes]
    apis = np.array([a.api or "" for a in spec.actions], dtype=object)[codes]
    rates = dict(base.error_rates)
    per_api: dict[str, Any] = {}
    for api in sorted({a.api for a in spec.actions if a.api}):
        rows = apis == api
        n = int(rows.sum())
        if n < min_rows:
            per_api[api] = {"rows": n, "skipped": f"fewer than {min_rows} rows"}
            continue
        observed = float(err[rows].mean())
        own = float(own_rate[rows].mean())
        rates[api] = float(np.clip(1.0 - (1.0 - observed) / max(1.0 - own, 1e-9), 0.0, 1.0))
        per_api[api] = {"rows": n, "observed_rate": observed, "api_rate": rates[api]}
    details["error_rates"] = per_api
    profile = {
        "description": "fitted to live traces by rlops calibrate",
        "latency_jitter_ms": {"min": float(jitter[0]), "max": float(jitter[1])},
        "error_rates": {k: float(v) for k, v in rates.items()},
    }
    if own_latency:
        profile["action_latency_ms"] = own_latency
    return profile, details


def fit_latency(
    pack: Pack, codes: np.ndarray, latency: np.ndarray, min_rows: int
) -> tuple[list[float], dict[str, dict[str, float]], dict[str, Any]]:
    """``(jitter range, per-action latency, details)``. An action's latency is its own normal
    draw plus the profile's uniform jitter, common to all actions. Per action with ``min_rows``
    rows, the residual against its declared latency has mean ``(lo + hi) / 2`` and variance
    ``(hi − lo)² / 12 + declared std²``: the jitter is the median over actions of these moment
    equations (so one action whose own latency changed — an API slowing down — does not bend
    it), and each action's own mean and std are then what its rows leave after the jitter."""
    import numpy as np

    spec = pack.scenario.spec
    base = spec.profiles[spec.default_profile]
    ok = np.isfinite(latency)
    per_action = [(a, latency[ok & (codes == j)]) for j, a in enumerate(spec.actions)]
    per_action = [(a, x) for a, x in per_action if x.size >= min_rows]
    details: dict[str, Any] = {"latency_rows": int(ok.sum())}
    if not per_action:
        return list(base.latency_jitter_ms), {}, details
    center = float(np.median([x.mean() - a.latency_mean_ms for a, x in per_action]))
    spread = float(np.median([x.var() - a.latency_std_ms**2 for a, x in per_action]))
    width = math.sqrt(12.0 * max(spread, 0.0))
    lo = max(0.0, center - width / 2)
    hi = max(lo, center + width / 2)
    own = {
        a.name: {
            "mean": max(float(x.mean()) - (lo + hi) / 2, 0.0),
            "std": math.sqrt(max(float(x.var()) - (hi - lo) ** 2 / 12.0, 0.0)),
        }
        for a, x in per_action
    }
    details.update(jitter_center_ms=center, jitter_width_ms=width, actions={a.name: int(x.size) for a, x in per_action})
    return [lo, hi], own, details


# --------------------------------------------------------------------------- the calibration
def _in_store(ctx: StepServices, uri: str) -> bool:
    """Whether ``uri`` is a partition of the scenario's folder in the trace store."""
    return uri.rstrip("/").startswith(ctx.traces.scenario_uri(ctx.scenario).rstrip("/") + "/")


def live_rows(df: pd.DataFrame, source: str | None) -> pd.DataFrame:
    if source and "source" in df.columns:
        df = df[df["source"] == source]
    return df.reset_index(drop=True)


def fit_calibration(pack: Pack, df: pd.DataFrame, cfg: RecalConfig) -> CalibrationFit:
    """The fields, the simulation profile and the populations fitted from live trace rows."""
    if df.empty:
        raise ValueError(f"no {cfg.source or ''} trace rows to recalibrate from".replace("  ", " "))
    missing = {"episode_id", "step", "action"} - set(df.columns)
    if missing:
        raise ValueError(f"trace rows lack column(s) {sorted(missing)}; expected the trace record")

    changed = changed_by_actions(pack)
    fields: dict[str, dict[str, Any]] = {}
    fits: dict[str, FieldFit] = {}
    skipped: dict[str, str] = {}
    values: dict[str, pd.Series] = {}
    for f in pack.scenario.spec.fields:
        if not fittable(f):
            skipped[f.path] = unfittable_reason(f)
            continue
        values[f.path] = initial_series(pack, df, f.path, f.path in changed)
        x = values[f.path].to_numpy()
        if x.size < cfg.min_rows:
            skipped[f.path] = f"{x.size} initial values (< min_rows {cfg.min_rows})"
            continue
        fields[f.path] = fit_field(f, x)
        fits[f.path] = FieldFit(int(x.size), declared(f), fields[f.path])
    profile, sim = fit_simulation(pack, df, cfg.min_rows)
    features = mixture_features(pack, fields)
    mix = fit_mixture(values, fields, features, cfg.max_components, cfg.min_component_weight, cfg.seed)
    return CalibrationFit(
        fields=fields,
        profile=profile,
        field_fits=fits,
        skipped=skipped,
        simulation_fit=sim,
        rows=len(df),
        episodes=int(df["episode_id"].nunique()),
        mixture_features=features,
        mixture=mix,
        population=None if mix is None else segment_population(pack, values, fields, mix, cfg.min_rows),
    )


def check_calibration(
    before: Pack,
    before_profile: str,
    after: Pack,
    df: pd.DataFrame,
    fitted: list[str],
    samples: int,
    seed: int,
) -> dict[str, dict[str, float | str]]:
    """Distance of sandbox initial states to live initial values, before and after, per field:
    KS statistic for numbers, total-variation distance for enums and bools."""
    import numpy as np
    import torch
    from scipy.stats import ks_2samp

    key = torch.arange(samples, dtype=torch.int64) * 7919 + seed
    S_before = before.scenario.sample_initial(key, before_profile)
    S_after = after.scenario.sample_initial(key, PROFILE)
    changed = changed_by_actions(before)
    out: dict[str, dict[str, float | str]] = {}
    for path in fitted:
        f = before.scenario.fields[path]
        live = initial_values(before, df, path, path in changed)
        col = before.scenario.columns[path]
        b, a = S_before[:, col].double().numpy(), S_after[:, col].double().numpy()
        if f.type in ("enum", "bool"):
            k = len(f.values) if f.type == "enum" else 2

            def share(v: np.ndarray, k: int = k) -> np.ndarray:
                return np.bincount(v.astype(np.int64), minlength=k)[:k] / max(v.size, 1)

            def dist(u: np.ndarray, v: np.ndarray) -> float:
                return 0.5 * float(np.abs(share(u) - share(v)).sum())

            out[path] = {"metric": "tv", "before": dist(b, live), "after": dist(a, live)}
        else:
            out[path] = {
                "metric": "ks",
                "before": float(ks_2samp(b, live).statistic),
                "after": float(ks_2samp(a, live).statistic),
            }
    return out


def worse_fits(check: dict[str, dict[str, float]], tolerance: float) -> list[str]:
    """Fields whose fitted distribution is farther from live than the current sandbox's."""
    return sorted(p for p, c in check.items() if c["after"] > c["before"] + tolerance)


def active_profile(pack: Pack) -> str:

    return default_profile(pack, "sandbox")


def fit_rewards(
    services: StepServices,
    after: Pack,
    live: pd.DataFrame,
    episodes: int,
    reward_fn: str,
    seed: int,
    cfg: RecalConfig,
) -> RewardScales:
    """The ``rewards:`` block: the champion rolled out for ``episodes`` episodes (seeded by ``seed``) in
    the newly fitted world ``after`` (scored by the reward function that applies, ``reward_fn``), its
    declared outcome scores against ``live``'s (:func:`rlops.pipeline_steps.drift.outcome_fit.fit_reward_scales`)."""
    if live.empty or not outcome_components(after):
        return RewardScales({})
    sandbox, _ = champion_rows(services, after, active_profile(after), episodes, reward_fn, seed)
    return RewardScales(fit_reward_scales(after, live, sandbox, cfg))


@dataclass(frozen=True)
class RecalibrationSummary(StepResult):
    """A calibration version fitted to live traces, checked, and written (unless dry)."""

    version: str
    """The calibration version: the run key that fitted it."""
    calibration_uri: str
    latest_uri: str
    rows: int
    """Live rows fitted on."""
    fields: list[str]
    """The state fields whose distribution was fitted."""
    skipped: dict[str, Any]
    """Fields not fitted, with why."""
    rejected: dict[str, Any]
    """Fitted fields whose fit matched live worse than the current sandbox: kept as they were."""
    segments: int
    """Population segments fitted (1: one population)."""
    profile: str
    """The simulation profile the calibration defines."""
    simulation: dict[str, Any]
    """Its latency jitter and error rates, fitted from live."""
    check: dict[str, Any]
    """Per field: the distance to live before and after."""
    rewards: dict[str, Any]
    """Outcome scores rescaled to live (per reward component and sign)."""
    dry_run: bool
    run_id: str | None = None
    """The MLflow run of the recalibration (None: a dry run)."""


def recalibrate(ctx: StepContext, traces_uri: str | None = None) -> RecalibrationSummary:
    """Fit, check and write a new calibration version; returns a summary."""
    cfg = ctx.config.recalibrate
    uri = traces_uri or ctx.traces.scenario_uri(ctx.scenario)
    window = ctx.key.lookback(cfg.window_hours) if cfg.window_hours else None
    if uri == ctx.traces.scenario_uri(ctx.scenario):  # the trace store: late outcomes known at the run key joined
        df = live_rows(ctx.traces.read(ctx.scenario, window, as_of=ctx.key.end), cfg.source)
    else:
        df = live_rows(ctx.traces.reader.read(uri, window), cfg.source)
    # the states are fitted on every row; what outcomes say only on episodes whose outcome is final
    outcomes_known = settled(df).reset_index(drop=True)
    if uri != ctx.traces.scenario_uri(ctx.scenario) and _in_store(ctx, uri) and ctx.traces.joins_outcomes(ctx.scenario):
        # an interval of the store (the drift monitor's hour): its rows await their outcomes, so the
        # outcome evidence is the episodes that became final in it, earlier ones whose outcome came included
        settled_rows = settled_in(ctx.traces, ctx.scenario, (ctx.key.start, ctx.key.end), as_of=ctx.key.end)
        outcomes_known = live_rows(settled_rows, cfg.source)
    if "scenario" in df.columns:
        df = df[df["scenario"] == ctx.scenario].reset_index(drop=True)
    written = ctx.load_pack(calibration=None)
    current = ctx.load_pack()
    cal = fit_calibration(written, df, cfg).as_dict()
    now = datetime.now(UTC).isoformat(timespec="seconds")
    cal.update(version=ctx.run_key, scenario=ctx.scenario, created=now, traces_uri=uri)
    if cfg.fit_outcomes:  # fittable hidden dynamics (scenario `fit:`), from the same live rows
        outcomes = fit_outcomes(current, outcomes_known, cfg)
        if outcomes:
            cal["outcomes"] = outcomes
    after = load_pack(ctx.pack_dir, calibration=cal, check_liveness=False)
    cal["check"] = check_calibration(
        current, active_profile(current), after, df, list(cal["fields"]), cfg.check_samples, cfg.seed
    )
    rejected = worse_fits(cal["check"], cfg.worse_tolerance)
    if rejected:  # keep the current sandbox's distribution of a field whose fit matches live worse
        cal["fit"]["rejected"] = {p: cal["check"][p] for p in rejected}
        cal["fields"] = {p: v for p, v in cal["fields"].items() if p not in rejected}
        if "population" in cal:
            cal["population"] = drop_fields(cal["population"], set(rejected))
        after = load_pack(ctx.pack_dir, calibration=cal, check_liveness=False)
        cal["check"] = check_calibration(
            current, active_profile(current), after, df, list(cal["fields"]), cfg.check_samples, cfg.seed
        )
    if cfg.fit_outcomes:
        reward_fn = ctx.reward_choice(pack=written).reward_fn
        episodes = int(ctx.config.drift.baseline_episodes)
        rewards = fit_rewards(ctx, after, outcomes_known, episodes, reward_fn, ctx.config.seed, cfg)
        if rewards.scales:
            cal["rewards"] = rewards.as_dict()
    version_uri = ctx.uri("calibrations", ctx.scenario, f"{ctx.run_key}.json")
    latest_uri = ctx.uri("calibrations", ctx.scenario, "latest.json")
    result = RecalibrationSummary(
        version=ctx.run_key,
        calibration_uri=version_uri,
        latest_uri=latest_uri,
        rows=len(df),
        fields=sorted(cal["fields"]),
        skipped=cal["fit"]["skipped"],
        rejected=cal["fit"].get("rejected", {}),
        segments=len(cal.get("population") or []) or 1,
        profile=PROFILE,
        simulation=cal["simulation"]["profiles"][PROFILE],
        check=cal["check"],
        rewards=cal.get("rewards", {}),
        dry_run=ctx.dry_run,
    )
    if ctx.dry_run:
        return result
    ctx.storage.write_json(version_uri, cal)
    ctx.storage.write_json(latest_uri, cal)

    with step_run(ctx, T.RECALIBRATE, extra_tags={T.CALIBRATION_VERSION: ctx.run_key}) as run:
        log_dataset_inputs(run, [parquet_dataset(ctx.storage, uri, f"traces-{ctx.scenario}")], CALIBRATION)
        flat = {f"{path}.{k}": v for path, spec in cal["fields"].items() for k, v in spec.items() if k != "dist"}
        flat.update({f"sim.{k}": v for k, v in result.simulation.items() if k != "description"})
        run.log_params({**flat, "traces_uri": uri, "calibration_uri": version_uri})
        run.log_metrics(
            {
                f"{m}_{when}/{p}": v[when]
                for p, v in cal["check"].items()
                for when in ("before", "after")
                for m in [v["metric"]]
            }
            | {
                f"reward_scale_{sign}/{name}": float(v["factor"])
                for name, signs in (cal.get("rewards") or {}).items()
                for sign, v in signs.items()
            }
            | {"rows": float(len(df))},
            step=0,
        )
        run.log_dict(cal, f"calibration/{ctx.run_key}.json")
    return dataclasses.replace(result, run_id=run.run_id)


__all__ = [
    "PROFILE",
    "CalibrationFit",
    "FieldFit",
    "RecalConfig",
    "RewardScales",
    "check_calibration",
    "fit_calibration",
    "fit_rewards",
    "fit_simulation",
    "recalibrate",
]
