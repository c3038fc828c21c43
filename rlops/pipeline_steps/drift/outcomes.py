"""Outcome drift: do live rewards still follow what the calibrated sandbox predicts for the same states?

Input drift (:mod:`rlops.pipeline_steps.drift.stats`) compares what the agent *sees*. A change in
outcomes — defaults rise among some applicants, the business scores with a new reward function —
leaves the inputs as they were; only what follows a decision moves. This monitor is a calibration
test of the sandbox's reward predictions on live states:

1. The sandbox's prediction: on the calibrated sandbox's rows (the drift check's baseline — the
   champion served in the calibrated sandbox), a ridge regression per action of the step's reward
   on the state features (the encoded observed fields and the mask), fitted on each half of the
   episodes (two-fold cross-fitting).
2. Residuals ``reward − predicted``: of each sandbox half under the model fitted on the other (what
   a calibrated world's residuals look like, misfit of the regression included), and of the live
   rows of the hour under the mean of the two models.
3. Per cell — each action, overall, in each ``evaluate.segments`` segment of the pack and in each
   automatic segment (every observed numeric field's quarters, ``drift.outcome_quantiles``, and
   every enum field's values, so a change confined to some applicants is not diluted) — a Welch
   t-test of live against sandbox residuals: the p-value and the effect size (standardised mean
   difference, Cohen's d with the pooled standard deviation);
   p-values are Bonferroni-adjusted within two families, each given half of ``alpha``: the declared
   cells (each action overall and in the pack's segments) and the automatic ones.
   A cell with fewer than ``outcome_min_rows`` rows on either side is reported, not tested.

Outcome drift is raised when some cell has ``p < drift.outcome_alpha`` and ``|d| ≥
drift.outcome_min_effect``. It is judged on the rows whose outcome has arrived: a reward settled
later in the episode (``settle_on``) arrives with the row that settles it, so a concept change shows
as soon as its first episodes complete. A fresh calibration of the same world draws residuals from
the same distribution, so it raises nothing.

The alarm (``onset``, which asks the drift monitor for an emergency retrain) is raised once per
cell and once per episode of drift (:func:`next_onset_state`): the cells that have drifted are
kept in ``drift_state/<scenario>/outcome_cells.json``, and drift still present an hour after an
onset — the same cells, or more of them reaching significance as outcomes accumulate — is
reported (``drifted``) without asking for another retrain: retraining in a sandbox that cannot see
the change would not change the policy. The episode ends after ``drift.outcome_clear_hours``
consecutive hours without outcome drift (a drift the recalibration cannot fit, such as the
business's new reward function, passes in and out of significance from hour to hour as the test's
power varies: on the credit pack it was significant at the change, then 7 hours later, in new
cells); after that a new cell raises it again.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.common.params_drift import DriftParams
from rlops.data_contracts.schema import STATE_PREFIX
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.promotion.ope_direct import fit_linear_q
from rlops.registry import tags as T
from rlops.sandbox.expr import BOOL, compile_expr
from rlops.trace_store.settled import settled_in
from rlops.trace_store.states import action_codes, field_values, state_features, states_from_traces

if TYPE_CHECKING:
    import pandas as pd

    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack


@dataclass(frozen=True)
class OutcomeConfig:
    """The ``drift:`` params block's ``outcome_*`` settings (their defaults live in the params model,
    :class:`~rlops.common.params_drift.DriftParams`)."""

    enabled: bool
    alpha: float
    min_effect: float
    min_rows: int
    ridge: float
    quantiles: int
    clear_hours: int

    @classmethod
    def from_drift(cls, drift: DriftParams) -> OutcomeConfig:
        return cls(
            enabled=drift.outcome_enabled,
            alpha=drift.outcome_alpha,
            min_effect=drift.outcome_min_effect,
            min_rows=drift.outcome_min_rows,
            ridge=drift.outcome_ridge,
            quantiles=drift.outcome_quantiles,
            clear_hours=drift.outcome_clear_hours,
        )


@dataclass
class OutcomeCell:
    """The calibration test of one (action, segment) cell."""

    action: str
    segment: str
    live_rows: int
    sandbox_rows: int
    live_residual: float
    sandbox_residual: float
    effect: float
    p_value: float
    p_adjusted: float
    drifted: bool = False
    tested: bool = True


@dataclass
class OutcomeReport:
    """Outcome drift of one window."""

    cells: list[OutcomeCell] = field(default_factory=list)
    drifted: bool = False
    alpha: float = 0.01
    min_effect: float = 0.1
    live_rows: int = 0
    sandbox_rows: int = 0
    reason: str | None = None
    onset: bool = False
    """Whether a cell drifted that had not drifted before (the alarm that asks for a retrain)."""

    @property
    def drifted_cells(self) -> list[str]:
        return [f"{c.action}@{c.segment}" for c in self.cells if c.drifted]

    @property
    def summary(self) -> str:
        if self.reason:
            return f"outcome drift not tested: {self.reason}"
        worst = min((c for c in self.cells if c.tested), key=lambda c: c.p_adjusted, default=None)
        head = (
            f"OUTCOME DRIFT in {len(self.drifted_cells)} cell(s): {', '.join(self.drifted_cells[:4])}"
            if self.drifted
            else "no outcome drift"
        )
        if worst is None:
            return head
        return (
            f"{head} (most significant {worst.action}@{worst.segment}: live residual "
            f"{worst.live_residual:+.3f} vs sandbox {worst.sandbox_residual:+.3f}, d={worst.effect:+.2f}, "
            f"p={worst.p_adjusted:.2g})"
        )

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "cells"}
        out["cells"] = [
            {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in asdict(c).items()}
            for c in self.cells
        ]
        out.update(summary=self.summary, drifted_cells=self.drifted_cells)
        return out

    def metrics(self) -> dict[str, float]:
        tested = [c for c in self.cells if c.tested]
        out = {
            "outcome.drifted": float(self.drifted),
            "outcome.onset": float(self.onset),
            "outcome.n_cells": float(len(tested)),
            "outcome.n_drifted": float(len(self.drifted_cells)),
        }
        if tested:
            out["outcome.min_p"] = min(c.p_adjusted for c in tested)
            out["outcome.max_abs_effect"] = max(abs(c.effect) for c in tested)
        return out


def welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sided Welch t-test of mean(a) = mean(b) → (p-value, Cohen's d with the pooled sd)."""
    from scipy.stats import ttest_ind

    va, vb = a.var(ddof=1), b.var(ddof=1)
    pooled = math.sqrt(((len(a) - 1) * va + (len(b) - 1) * vb) / max(len(a) + len(b) - 2, 1))
    diff = float(a.mean() - b.mean())
    if pooled < 1e-12:
        return (1.0 if abs(diff) < 1e-12 else 0.0), (0.0 if abs(diff) < 1e-12 else math.copysign(math.inf, diff))
    p = float(ttest_ind(a, b, equal_var=False).pvalue)
    return (p if math.isfinite(p) else 1.0), diff / pooled


def field_segments(pack: Pack, reference: pd.DataFrame, quantiles: int) -> dict[str, tuple[str, float, float]]:
    """Automatic segments: each observed numeric field cut at the ``reference`` rows' quantiles
    (``age:q4`` = its top quarter), each enum field by value."""
    out: dict[str, tuple[str, float, float]] = {}
    for f in pack.scenario.spec.fields:
        col = STATE_PREFIX + f.path
        if not f.observed or col not in reference or f.type == "bool":
            continue
        v = field_values(pack, f.path, reference[col])
        v = v[np.isfinite(v)]
        if f.type == "enum":
            out.update({f"{f.path}={name}": (f.path, float(i), float(i)) for i, name in enumerate(f.values)})
        elif len(v) and quantiles > 1 and np.unique(v).size > quantiles:
            cuts = np.quantile(v, np.linspace(0, 1, quantiles + 1))
            cuts[0], cuts[-1] = -np.inf, np.inf
            out.update({f"{f.path}:q{k + 1}": (f.path, float(cuts[k]), float(cuts[k + 1])) for k in range(quantiles)})
    return out


def segment_masks(
    pack: Pack,
    frame: pd.DataFrame,
    expressions: dict[str, str] | None,
    fields: dict[str, tuple[str, float, float]] | None = None,
) -> dict[str, np.ndarray]:
    """``all``, each expression segment and each automatic field segment, evaluated on the rows'
    observed state (a field not yet visible on a row puts the row in none of its segments)."""
    out = {"all": np.ones(len(frame), dtype=bool)}
    if expressions:
        S = states_from_traces(pack, frame)
        for name, source in expressions.items():
            out[name] = compile_expr(source, pack.scenario.resolve, want=BOOL)(S).cpu().numpy().astype(bool)
    values: dict[str, np.ndarray] = {}
    for name, (path, lo, hi) in (fields or {}).items():
        if path not in values:
            col = STATE_PREFIX + path
            values[path] = field_values(pack, path, frame[col]) if col in frame else np.full(len(frame), np.nan)
        v = values[path]
        with np.errstate(invalid="ignore"):
            out[name] = (v == lo) if lo == hi else ((v > lo) & (v <= hi))
    return out


def outcome_drift(
    pack: Pack, sandbox: pd.DataFrame, live: pd.DataFrame, cfg: OutcomeConfig, segments: dict[str, str] | None = None
) -> OutcomeReport:
    """The calibration test of ``live`` rows against the calibrated sandbox's ``sandbox`` rows."""
    if "reward_total" in live:  # a step without a reward has no outcome to compare
        live = live[live["reward_total"].notna()]
    rep = OutcomeReport(alpha=cfg.alpha, min_effect=cfg.min_effect, live_rows=len(live), sandbox_rows=len(sandbox))
    if live.empty or sandbox.empty or "reward_total" not in live:
        rep.reason = "no live or no sandbox rows with rewards"
        return rep
    sandbox = sandbox.reset_index(drop=True)
    live = live.reset_index(drop=True)
    episodes = sandbox["episode_id"].astype(str)
    fit = _half(episodes)
    x_sb, x_live = state_features(pack, sandbox).numpy(), state_features(pack, live).numpy()
    a_sb, a_live = action_codes(pack, sandbox["action"]), action_codes(pack, live["action"])
    r_sb, r_live = sandbox["reward_total"].to_numpy(np.float64), live["reward_total"].to_numpy(np.float64)
    # Cross-fitting: each half's residuals come from the model fitted on the other half, so every
    # sandbox row is held out once; live residuals use the mean of the two models.
    idx_sb, idx_live = np.arange(len(sandbox)), np.arange(len(live))
    res_sb = np.empty(len(sandbox))
    pred_live = np.zeros(len(live))
    for part in (fit, ~fit):
        model = fit_linear_q(x_sb[part], a_sb[part], r_sb[part], pack.scenario.n_actions, cfg.ridge)
        res_sb[~part] = r_sb[~part] - model.predict(x_sb[~part])[idx_sb[: (~part).sum()], a_sb[~part]]
        pred_live += 0.5 * model.predict(x_live)[idx_live, a_live]
    res_live = r_live - pred_live
    held = np.ones(len(sandbox), dtype=bool)
    auto = field_segments(pack, sandbox, cfg.quantiles)
    seg_sb, seg_live = segment_masks(pack, sandbox, segments, auto), segment_masks(pack, live, segments, auto)
    names = pack.scenario.action_names
    for a, action in enumerate(names):
        for seg in seg_sb:
            s = res_sb[held & (a_sb == a) & seg_sb[seg]]
            v = res_live[(a_live == a) & seg_live[seg]]
            if min(len(s), len(v)) < cfg.min_rows:
                if len(v):
                    rep.cells.append(
                        OutcomeCell(
                            action,
                            seg,
                            len(v),
                            len(s),
                            float(v.mean()),
                            float(s.mean()) if len(s) else math.nan,
                            math.nan,
                            math.nan,
                            math.nan,
                            tested=False,
                        )
                    )
                continue
            p, d = welch(v, s)
            rep.cells.append(OutcomeCell(action, seg, len(v), len(s), float(v.mean()), float(s.mean()), d, p, p))
    tested = [c for c in rep.cells if c.tested]
    # Two families, each with half of alpha (Bonferroni within): the few declared cells (each action
    # overall and in the pack's segments) and the many automatic ones — so adding automatic
    # segments does not dilute a change that shows across all applicants.
    declared = {"all", *(segments or {})}
    family = {True: sum(c.segment in declared for c in tested), False: sum(c.segment not in declared for c in tested)}
    n_families = sum(1 for k in family.values() if k)
    for c in tested:
        c.p_adjusted = min(1.0, c.p_value * family[c.segment in declared] * n_families)
        c.drifted = c.p_adjusted < cfg.alpha and abs(c.effect) >= cfg.min_effect
    rep.drifted = any(c.drifted for c in tested)
    if not tested:
        rep.reason = f"no (action, segment) cell with {cfg.min_rows} rows on both sides"
    return rep


def _half(episodes: pd.Series) -> np.ndarray:
    """A deterministic half of the episodes (by a stable hash of the id): the regression's fit set."""
    import pandas as pd

    out: np.ndarray = pd.util.hash_array(episodes.to_numpy(dtype=object)) % 2 == 0
    return out


def next_onset_state(
    state: dict[str, Any], drifted_cells: list[str], clear_hours: int = 1
) -> tuple[bool, dict[str, Any]]:
    """Whether this hour's drifted cells are an onset, and the state to keep (pure).

    An onset is a cell drifting that had not drifted before, outside an episode of drift: once an
    onset has been raised (and its recalibration and retrain have run), the drift that persists
    hour after hour — more cells reaching significance as outcomes accumulate, or a change the
    recalibration cannot fit, such as the business's new reward function — is reported, not raised
    again, until ``clear_hours`` consecutive hours without outcome drift end the episode."""
    seen = set(state.get("cells", []))
    persisting = bool(state.get("persisting", False))
    if not drifted_cells:
        clean = int(state.get("clean_hours", 0)) + 1
        still = persisting and clean < clear_hours
        return False, {"cells": sorted(seen), "persisting": still, "clean_hours": clean if still else 0}
    new = [c for c in drifted_cells if c not in seen]
    onset = bool(new) and not persisting
    return onset, {"cells": sorted(seen | set(drifted_cells)), "persisting": persisting or onset, "clean_hours": 0}


def outcome_drift_step(
    ctx: StepServices,
    drift: DriftParams,
    segments: dict[str, str],
    pack: Pack,
    sandbox: pd.DataFrame,
    live: pd.DataFrame,
    window: tuple[datetime, datetime],
) -> OutcomeReport:
    """The drift check's call: test (the ``drift:`` block's settings, ``drift``; per ``segments``, the
    ``evaluate:`` block's), write ``outcomes.json`` beside the drift report and log the
    ``outcome.*`` metrics and the report to an MLflow run of the drift step. A dry run tests and
    decides the onset from the kept state alike, and writes and logs nothing. Where outcomes arrive
    late, the live evidence is the episodes that became final in ``window`` (the live rows'), not
    those decided in it (:func:`rlops.trace_store.settled.settled_in`)."""
    cfg = OutcomeConfig.from_drift(drift)
    if not cfg.enabled:
        return OutcomeReport(reason="off (drift.outcome_enabled)")
    if "episode_id" in live.columns and ctx.traces.joins_outcomes(ctx.scenario):
        # an episode still waiting for its outcome is no evidence; one whose outcome came in the window is
        live = settled_in(ctx.traces, ctx.scenario, window, list(live.columns), as_of=ctx.key.end)
    rep = outcome_drift(pack, sandbox, live, cfg, segments)
    state_uri = ctx.uri("drift_state", ctx.scenario, "outcome_cells.json")
    state = ctx.storage.read_json(state_uri) if ctx.storage.exists(state_uri) else {}
    # a dry run decides the onset as the real run would (it drives the retrain), keeping nothing
    rep.onset, after = next_onset_state(state, rep.drifted_cells, cfg.clear_hours)
    if ctx.dry_run:
        return rep
    if after != state:
        ctx.storage.write_json(state_uri, {**after, "run_key": ctx.run_key})
    doc = rep.to_dict()
    uri = f"{ctx.report_uri('drift')}/outcomes.json"
    ctx.storage.write_json(uri, doc)

    with step_run(ctx, T.DRIFT, label="outcomes") as run:
        run.log_params({"outcome_alpha": cfg.alpha, "outcome_min_effect": cfg.min_effect, "report_uri": uri})
        run.log_metrics(rep.metrics(), step=0)
        run.log_dict(doc, "drift/outcomes.json")
    return rep
