"""Recovery from outcomes: fit the declared parameters of the hidden dynamics to live outcomes.

A hidden probability field that declares ``fit:`` in scenario.yaml (docs/scenario-dsl.md,
"Fittable outcome parameters") — the credit pack's ``hidden.default_prob`` — is fitted here by
maximum likelihood from the live rows that reveal its event:

1. The *settling* rows: those whose reward breakdown carries the declared ``outcome`` component
   (``loan_outcome``); the event happened where its score has the declared sign (``negative``: the
   loan defaulted).
2. The sandbox's probability of the event on each of those rows: the pack's own expression for the
   field (the effect of the decision that preceded the settling row, else the field's ``init``
   expression), evaluated on the row's observed state.
3. Segments: each ``by`` field's values (enum) or, numeric, its eighths (cut at the settling rows'
   octiles) and the tails above and below each cut (a threshold change, "over 60", is one tail).
   Per segment, the factor ``θ`` maximising the Bernoulli log-likelihood of the outcomes
   under ``min(1, θ·p)``, and the likelihood-ratio test of ``θ = 1`` (χ², one degree of freedom),
   Bonferroni-adjusted over the segments.
4. Greedily, the most significant factor (adjusted p < ``alpha``) is kept and the others refitted
   on top of it, up to ``max_factors``: overlapping segments (the oldest quarter, the retired) do
   not double-count one change.

The result, ``[{factor, when, p_value, rows, events, loglik_gain}]`` per field, goes into the
calibration's ``outcomes:`` block (:func:`rlops.sandbox.pack.apply_calibration` rewrites the field's
expressions in the calibrated scenario only) and, with the calibration, into its MLflow run.
A fresh calibration of an unchanged world finds no factor significant and writes none.

The same declared ``outcome`` component also says what an outcome is *worth*: the business may
start scoring it differently (a risk committee raises the loss given default) without the pack's
reward function changing. :func:`fit_reward_scales` compares the component's live scores with its
scores in the calibrated sandbox (the champion rolled out in the newly fitted world, scored by the
pack's function), separately for negative and positive scores: the ratio of their means is the
scale live traffic applies, kept when a Welch test rejects equal means (Bonferroni over the tests,
``p < alpha``) and the ratio is at least ``min_change`` from 1. It goes into the calibration's
``rewards:`` block; a pack loaded with that calibration scores the component's outcomes with it
(:attr:`rlops.sandbox.reward.RewardFunction.outcome_scales`) — in training, evaluation and the
drift baseline alike — while the pack's reward module stays as written.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.data_contracts.schema import STATE_PREFIX
from rlops.pipeline_steps.drift.outcomes import welch
from rlops.sandbox.expr import compile_expr
from rlops.sandbox.expr_runtime import NUM
from rlops.sandbox.outcome_params import field_node, fittable_fields
from rlops.trace_store.states import _previous_in_episode, action_codes, field_values, states_from_traces

if TYPE_CHECKING:
    import pandas as pd

    from rlops.common.params_drift import RecalConfig
    from rlops.sandbox.pack import Pack

GRID = np.exp(np.linspace(np.log(0.2), np.log(5.0), 161))
_EPS = 1e-6


def component_scores(frame: pd.DataFrame, component: str) -> np.ndarray:
    """The score of ``component`` in each row's reward breakdown JSON (NaN where absent)."""
    import pandas as pd

    pattern = r'"component":\s*"' + re.escape(component) + r'",\s*"score":\s*(-?[0-9.eE+-]+)'
    got = frame["reward_breakdown"].astype("string").str.extract(pattern, expand=False)
    out: np.ndarray = pd.to_numeric(got, errors="coerce").to_numpy(dtype=np.float64)
    return out


def field_probabilities(pack: Pack, doc: dict[str, Any], path: str, frame: pd.DataFrame) -> np.ndarray:
    """The pack's probability ``path`` on each row of ``frame`` (settling rows): the expression of
    the effect of the previous row's action where it sets the field, else the ``init`` expression."""
    S = states_from_traces(pack, frame)
    init = field_node(doc, path).get("init") or {}
    p = np.full(len(frame), np.nan)
    if isinstance(init, dict) and "expr" in init:
        p[:] = compile_expr(init["expr"], pack.scenario.resolve, want=NUM)(S).cpu().numpy()
    prev = _previous_in_episode(frame, (action_codes(pack, frame["action"]) + 1).astype(np.float32), 1) - 1
    for a, action in enumerate(doc.get("actions") or []):
        for eff in action.get("effects") or []:
            source = (eff.get("set") or {}).get(path) if isinstance(eff, dict) else None
            rows = prev == a
            if source is not None and rows.any():
                p[rows] = compile_expr(source, pack.scenario.resolve, want=NUM)(S[rows]).cpu().numpy()
    out: np.ndarray = np.clip(p, _EPS, 1 - _EPS)
    return out


def _loglik(y: np.ndarray, p: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """Bernoulli log-likelihood of ``y`` under ``min(1, θ·p)`` for each θ of ``theta`` → ``[G]``."""
    q = np.clip(theta[:, None] * p[None, :], _EPS, 1 - _EPS)
    out: np.ndarray = (y[None, :] * np.log(q) + (1 - y[None, :]) * np.log1p(-q)).sum(axis=1)
    return out


def segments(pack: Pack, frame: pd.DataFrame, by: list[str], quantiles: int) -> dict[str, np.ndarray]:
    """``{condition expression: row mask}`` for each ``by`` field's values (enum) or, numeric, its
    octile bins and the tails above and below each inner cut."""
    out: dict[str, np.ndarray] = {}
    for path in by:
        spec = pack.scenario.fields.get(path)
        col = STATE_PREFIX + path
        if spec is None or col not in frame:
            continue
        v = field_values(pack, path, frame[col])
        if spec.type == "enum":
            out.update({f"{path} == '{name}'": v == i for i, name in enumerate(spec.values)})
            continue
        ok = np.isfinite(v)
        if ok.sum() < quantiles * 10:
            continue
        cuts = np.unique(np.round(np.quantile(v[ok], np.linspace(0, 1, quantiles + 1)[1:-1]), 6))
        edges = [-np.inf, *cuts, np.inf]
        with np.errstate(invalid="ignore"):
            for lo, hi in zip(edges[:-1], edges[1:]):
                parts = ([f"{path} > {float(lo)!r}"] if np.isfinite(lo) else []) + (
                    [f"{path} <= {float(hi)!r}"] if np.isfinite(hi) else []
                )
                out[" and ".join(parts)] = ok & (v > lo) & (v <= hi)
            # and each cut's two tails: a change in outcomes is often a threshold ("applicants
            # over 60"), which one bin only partly covers and a tail covers whole
            # (the tail below the first cut and the one above the last are bins already)
            for i, cut in enumerate(cuts):
                if i < len(cuts) - 1:
                    out[f"{path} > {float(cut)!r}"] = ok & (v > cut)
                if i > 0:
                    out[f"{path} <= {float(cut)!r}"] = ok & (v <= cut)
    return out


def fit_factors(
    y: np.ndarray,
    p: np.ndarray,
    masks: dict[str, np.ndarray],
    alpha: float,
    max_factors: int,
    min_rows: int,
) -> list[dict[str, Any]]:
    """The greedy maximum-likelihood factors of step 3–4 of the module docstring."""
    from scipy.stats import chi2

    base = p.copy()
    chosen: list[dict[str, Any]] = []
    for _ in range(max_factors):
        best: dict[str, Any] | None = None
        tested = {w: m for w, m in masks.items() if m.sum() >= min_rows and w not in {c["when"] for c in chosen}}
        for when, m in tested.items():
            ll = _loglik(y[m], base[m], GRID)
            g = int(ll.argmax())
            gain = float(ll[g] - _loglik(y[m], base[m], np.array([1.0]))[0])
            p_value = float(chi2.sf(2 * max(gain, 0.0), 1)) * len(tested)
            if p_value < alpha and (best is None or p_value < best["p_value"]):
                best = {
                    "factor": round(float(GRID[g]), 4),
                    "when": when,
                    "p_value": min(1.0, p_value),
                    "rows": int(m.sum()),
                    "events": int(y[m].sum()),
                    "loglik_gain": round(gain, 3),
                    "_mask": m,
                }
        if best is None:
            break
        m = np.asarray(best.pop("_mask"), dtype=bool)
        base = np.where(m, np.clip(base * best["factor"], _EPS, 1 - _EPS), base)
        chosen.append(best)
    return chosen


def fit_outcomes(pack: Pack, frame: pd.DataFrame, cfg: RecalConfig) -> dict[str, list[dict[str, Any]]]:
    """Fitted factors of every fittable field of ``pack`` from the live rows ``frame`` (the
    pack's own expressions, not an earlier calibration's, are the baseline), with the
    ``recalibrate.outcome_*`` settings ``cfg``."""
    min_rows = cfg.outcome_min_rows
    import yaml

    doc = yaml.safe_load((pack.path / "scenario.yaml").read_text())
    out: dict[str, list[dict[str, Any]]] = {}
    if frame.empty or "reward_breakdown" not in frame:
        return out
    frame = frame.sort_values(["episode_id", "step"], kind="stable").reset_index(drop=True)
    for path, spec in fittable_fields(doc).items():
        score = component_scores(frame, str(spec["outcome"]))
        settle = np.isfinite(score) & (score != 0)
        if settle.sum() < min_rows:
            continue
        # the previous row of the same episode is needed for the decision: keep whole episodes
        episodes = frame.loc[settle, "episode_id"].unique()
        sub = frame[frame["episode_id"].isin(episodes)].reset_index(drop=True)
        s = component_scores(sub, str(spec["outcome"]))
        rows = np.isfinite(s) & (s != 0)
        p = field_probabilities(pack, doc, path, sub)[rows]
        y = ((s[rows] < 0) if spec.get("event_when", "negative") == "negative" else (s[rows] > 0)).astype(float)
        masks = segments(pack, sub[rows].reset_index(drop=True), list(spec["by"]), cfg.outcome_quantiles)
        factors = fit_factors(y, p, masks, cfg.outcome_alpha, cfg.outcome_max_factors, min_rows)
        if factors:
            out[path] = factors
    return out


def outcome_components(pack: Pack) -> list[str]:
    """The reward components the pack's fittable fields declare as their ``outcome``."""
    import yaml

    doc = yaml.safe_load((pack.path / "scenario.yaml").read_text())
    return sorted({str(spec["outcome"]) for spec in fittable_fields(doc).values() if spec.get("outcome")})


def fit_reward_scales(
    pack: Pack,
    live: pd.DataFrame,
    sandbox: pd.DataFrame,
    cfg: RecalConfig,
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{component: {negative|positive: {factor, p_value, rows, sandbox_rows, live_mean,
    sandbox_mean}}}`` for each declared ``outcome`` component whose live scores of one sign differ
    from the sandbox's (see the module docstring; ``alpha``, ``min_rows`` and ``min_change`` are
    ``recalibrate.outcome_alpha``, ``reward_scale_min_rows`` and ``reward_scale_min_change``)."""
    alpha, min_rows, min_change = cfg.outcome_alpha, cfg.reward_scale_min_rows, cfg.reward_scale_min_change
    if live.empty or sandbox.empty or "reward_breakdown" not in live or "reward_breakdown" not in sandbox:
        return {}
    tests: list[tuple[str, str, np.ndarray, np.ndarray]] = []
    for name in outcome_components(pack):
        s_live, s_sb = component_scores(live, name), component_scores(sandbox, name)
        for sign, pick in (("negative", np.less), ("positive", np.greater)):
            a, b = s_live[pick(s_live, 0)], s_sb[pick(s_sb, 0)]
            if min(len(a), len(b)) >= min_rows:
                tests.append((name, sign, a, b))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, sign, a, b in tests:
        p_value, _ = welch(a, b)
        p_adj = min(1.0, p_value * len(tests))
        factor = float(a.mean() / b.mean())
        if p_adj < alpha and abs(factor - 1.0) >= min_change:
            out.setdefault(name, {})[sign] = {
                "factor": round(factor, 4),
                "p_value": p_adj,
                "rows": len(a),
                "sandbox_rows": len(b),
                "live_mean": round(float(a.mean()), 4),
                "sandbox_mean": round(float(b.mean()), 4),
            }
    return out
