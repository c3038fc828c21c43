"""Off-policy views of the console: the ``ope:dr`` gate of an evaluation run, and shadow candidates.

* :func:`evaluation_ope` — what an evaluation run recorded of its off-policy evaluation on live
  traffic (``rlops/pipeline_steps/promotion/ope_gate.py``): the ``ope_*`` metrics (PDIS, WIS and DR
  with their interval bounds, episodes, effective sample size, the logged policy's live return, the
  sandbox estimate, the sim-to-real gap when there was one), the ``ope.*`` params (interval kind and
  level, direct method) and the ``rlops.ope.*`` tags (the gate's state and its skip reason).
* :func:`shadow_view` — per shadow candidate of a scenario's trace store (rows carrying
  ``shadow_policy_version``, written by ``PolicyClient(shadow=…)``): its decisions, its agreement
  with the served decisions overall and per served action, and an off-policy estimate of its value
  on the complete live episodes it shadowed throughout. The counts are one ``GROUP BY`` over four
  columns; the estimate reads a bounded sample of whole episodes of the columns it needs and runs
  the estimators of :mod:`rlops.pipeline_steps.promotion.ope` (no second copy of the math).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rlops.console import aggregates as agg
from rlops.pipeline_steps.promotion.ope import effective_sample_size, estimate_all, logged_propensities, to_episodes
from rlops.pipeline_steps.promotion.ope_sufficiency import traffic_problem
from rlops.pipeline_steps.promotion.ope_value import complete_live_episodes
from rlops.registry import tags as T

if TYPE_CHECKING:
    from rlops.console.data import ProjectData, TraceFile

# Rows of one candidate's shadowed episodes the estimate reads (whole episodes sampled past it): the
# WIS bootstrap holds ``bootstrap_samples × rows`` floats at once, 160 MB at 20 000 rows.
SHADOW_OPE_ROWS = 20_000
ESTIMATORS = (
    ("pdis", "PDIS", "per-decision importance sampling"),
    ("wis", "WIS", "weighted per-decision importance sampling"),
    ("dr", "DR", "doubly robust (the gate's estimate)"),
)
_COUNT_COLUMNS = ("shadow_policy_version", "policy_version", "action", "shadow_action")
_OPE_COLUMNS = (
    "episode_id",
    "step",
    "done",
    "source",
    "reward_total",
    "logp",
    "propensity",
    "fallback",
    "action",
    "shadow_action",
    "shadow_served_logp",
)


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# --------------------------------------------------------------------------- evaluation run
def _gate_state(gates: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    row = next((g for g in gates if g.get("gate") == name), None)
    return None if row is None else {"state": row.get("state"), "detail": row.get("detail") or ""}


def evaluation_ope(run: dict[str, Any], gates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The off-policy section of an evaluation page (None: the run predates off-policy evaluation)."""
    m, p, t = run.get("metrics") or {}, run.get("params") or {}, run.get("tags") or {}
    row = next((g for g in gates if g.get("gate") == "ope:dr"), None)
    state = t.get(T.OPE_STATE) or (row["state"] if row else None)
    if state is None and not any(k.startswith("ope_") for k in m):
        return None
    reason = t.get(T.OPE_REASON)
    if not reason and row is not None and state == "skipped":
        reason = str(row.get("detail") or "").removeprefix("skipped: ")
    estimates = [
        {
            "key": key,
            "name": name,
            "what": what,
            "value": _finite(m.get(f"ope_{key}")),
            "low": _finite(m.get(f"ope_{key}_low")),
            "high": _finite(m.get(f"ope_{key}_high")),
        }
        for key, name, what in ESTIMATORS
    ]
    dr_value = _finite(m.get("ope_dr"))
    sandbox = _finite(m.get("ope_sandbox_value"))
    if sandbox is None:  # runs logged before ope_sandbox_value: the same figure, the candidate's sandbox mean
        sandbox = _finite(m.get("candidate_mean_return"))
    return {
        "state": state or "unknown",
        "reason": reason or None,
        "estimates": [e for e in estimates if e["value"] is not None],
        "episodes": _finite(m.get("ope_episodes")),
        "ess": _finite(m.get("ope_ess")),
        "logged_return": _finite(m.get("ope_logged_return")),
        "agreement": _finite(m.get("ope_agreement")),
        "sandbox": sandbox,
        "sandbox_minus_dr": None if sandbox is None or dr_value is None else sandbox - dr_value,
        "gap": _finite(m.get("ope_sim_to_real_gap")),
        "incumbent_sandbox": _finite(m.get("ope_incumbent_sandbox_value")),
        "trust_ratio": _finite(m.get("ope_sim_to_real_ratio")),
        "trust": _gate_state(gates, "sandbox:trust"),
        "ci": p.get("ope.ci"),
        "confidence": _finite(p.get("ope.confidence")),
        "direct_method": p.get("ope.direct_method"),
        "target": p.get("ope.target"),
        "window_hours": p.get("ope.window_hours"),
        "tolerance": _finite(p.get("ope.tolerance")),
        "gap_threshold": _finite(p.get("ope.gap_threshold")),
        "threshold": (row or {}).get("threshold") or "",
    }


# --------------------------------------------------------------------------- shadow candidates
def agreement(counts: pd.DataFrame) -> list[dict[str, Any]]:
    """Per shadow candidate, from rows ``(shadow_policy_version, policy_version, action,
    shadow_action, n)``: decisions (rows where the shadow chose an action), errors (rows where it
    did not: a timeout or a failure), the share of decisions equal to the served action, and the
    same per served action with what the shadow chose most often instead. Most decisions first."""
    out: list[dict[str, Any]] = []
    for version, g in counts.groupby("shadow_policy_version", sort=True):
        n = g["n"].astype(np.int64)
        decided = g["shadow_action"].notna()
        same = decided & (g["shadow_action"] == g["action"])
        decisions, agreed = int(n[decided].sum()), int(n[same].sum())
        actions: list[dict[str, Any]] = []
        for action, a in g[decided].groupby("action", sort=True):
            na = a["n"].astype(np.int64)
            hit = a["shadow_action"] == action
            other = a[~hit].groupby("shadow_action")["n"].sum().sort_values(ascending=False, kind="stable")
            actions.append(
                {
                    "action": str(action),
                    "decisions": int(na.sum()),
                    "agreed": int(na[hit].sum()),
                    "agreement": float(na[hit].sum() / na.sum()),
                    "instead": None if other.empty else str(other.index[0]),
                    "instead_n": 0 if other.empty else int(other.iloc[0]),
                }
            )
        actions.sort(key=lambda r: (-r["decisions"], r["action"]))
        served = g.groupby("policy_version")["n"].sum().sort_values(ascending=False, kind="stable")
        out.append(
            {
                "version": str(version),
                "rows": int(n.sum()),
                "decisions": decisions,
                "errors": int(n[~decided].sum()),
                "agreed": agreed,
                "agreement": agreed / decisions if decisions else None,
                "actions": actions,
                "served_by": {str(k): int(v) for k, v in served.items()},
            }
        )
    return sorted(out, key=lambda c: (-c["decisions"], c["version"]))


def shadow_counts(data: ProjectData, scenario: str) -> pd.DataFrame:
    """Rows per (shadow candidate, served version, served action, shadow action): one ``GROUP BY``
    over those four columns in DuckDB (the pandas engine: the four columns read and grouped)."""
    empty = pd.DataFrame({c: pd.Series(dtype=object) for c in _COUNT_COLUMNS}).assign(n=pd.Series(dtype="int64"))
    reader, uri = data.trace_reader(scenario), data.trace_uri(scenario)
    if not reader.files(uri) or not set(_COUNT_COLUMNS) <= set(reader.columns(uri)):
        return empty
    if reader.engine == "duckdb":
        cols = ", ".join(f'CAST("{c}" AS VARCHAR) AS "{c}"' for c in _COUNT_COLUMNS)
        got = reader.query(
            uri, f"SELECT {cols}, count(*) AS n FROM traces WHERE shadow_policy_version IS NOT NULL GROUP BY ALL"
        )
    else:
        rows = reader.read(uri, columns=list(_COUNT_COLUMNS))
        rows = rows[rows["shadow_policy_version"].notna()].astype(object)
        got = rows.groupby(list(_COUNT_COLUMNS), dropna=False).size().rename("n").reset_index()
    if got.empty:
        return empty
    got = got.astype({c: object for c in _COUNT_COLUMNS})
    return got.where(got.notna(), None)


def shadow_estimate(rows: pd.DataFrame, cfg: Any) -> dict[str, Any]:
    """PDIS and WIS of one shadow candidate on its logged rows (``rows``: that candidate's rows, the
    :data:`_OPE_COLUMNS`), on the complete live episodes it shadowed at every step. The candidate's
    probability of the served action is, as ``ope.target`` says, 1 when it chose that action and 0
    otherwise (greedy: the candidate as it would serve) or ``exp(shadow_served_logp)``
    (stochastic); the logged propensity is the row's ``propensity`` (or ``exp(logp)``).
    Without a direct method the doubly robust estimate equals PDIS, so it is not shown here."""
    # A shadow logs its choice, not its whole distribution: ``serving`` is judged by that choice
    # alone (the exploration it would add is not on the row), as ``greedy`` is.
    greedy = cfg.target in ("greedy", "serving")
    out: dict[str, Any] = {"target": cfg.target, "episodes": 0, "partial_episodes": 0, "estimates": []}
    need = ["episode_id", "step", "done", "reward_total", "action", "shadow_action" if greedy else "shadow_served_logp"]
    lacking = [c for c in need if c not in rows] + ([] if {"logp", "propensity"} & set(rows) else ["logp/propensity"])
    if lacking:
        out["skipped"] = "the trace rows lack " + ", ".join(lacking)
        return out
    rows = complete_live_episodes(rows)
    if greedy:
        pi = np.where(rows["shadow_action"].isna(), np.nan, (rows["shadow_action"] == rows["action"]).to_numpy(float))
    else:
        pi = np.exp(pd.to_numeric(rows["shadow_served_logp"], errors="coerce").to_numpy(np.float64))
    partial = rows.loc[~np.isfinite(pi), "episode_id"].unique()  # a step the shadow failed on
    keep = ~rows["episode_id"].isin(partial).to_numpy()
    rows, pi = rows[keep], pi[keep]
    out["episodes"] = int(rows["episode_id"].nunique())
    out["partial_episodes"] = len(partial)
    problem = traffic_problem(rows, cfg)
    if problem:  # the gate's words, for the episodes a shadow saw rather than the gate's window
        out["skipped"] = problem.replace("episodes in the window", "episodes shadowed at every step")
        return out

    rho = pi / logged_propensities(rows)
    reward = pd.to_numeric(rows["reward_total"], errors="coerce").fillna(0.0).to_numpy(np.float64)
    ep = to_episodes(rows["episode_id"].astype(str).to_numpy(), rows["step"].to_numpy(), rho, reward)
    est = estimate_all(ep, cfg)
    out["estimates"] = [
        {"key": k, "name": name, "what": what, **est[k].to_dict()} for k, name, what in ESTIMATORS if k != "dr"
    ]
    out["ess"] = effective_sample_size(ep.rho)
    out["logged_return"] = float(ep.reward.sum(axis=1).mean())
    out["low_ess"] = out["ess"] < cfg.min_ess
    return out


def shadow_view(data: ProjectData, scenario: str, files: list[TraceFile], dg: str) -> dict[str, Any]:
    """Every shadow candidate of ``scenario``'s trace store with its agreement and estimate, kept as
    JSON under the console cache for the store's digest ``dg`` and the ``ope`` settings."""
    cfg = data.section(scenario, "ope")
    key = agg.digest([], dg, json.dumps(cfg.model_dump(), sort_keys=True, default=str), "shadow-1")
    folder = data.cache_dir(scenario)
    path = folder / f"shadow-{key}.json"
    if path.is_file():
        cached: dict[str, Any] = json.loads(path.read_text())
        return cached
    candidates = agreement(shadow_counts(data, scenario)) if files else []
    reader, uri = data.trace_reader(scenario), data.trace_uri(scenario)
    columns = reader.columns(uri) if candidates else []
    for c in candidates:
        rows, total = reader.sample_episodes(
            uri,
            SHADOW_OPE_ROWS,
            columns=[x for x in _OPE_COLUMNS if x in columns],
            where={"shadow_policy_version": c["version"]},
            total=c["rows"],
        )
        c["ope"] = _json_safe(shadow_estimate(rows, cfg))
        c["ope"]["sampled_rows"] = len(rows) if len(rows) < total else None
    out = {
        "digest": dg,
        "shadow_rows": sum(c["rows"] for c in candidates),
        "candidates": candidates,
        "ope": {"min_episodes": cfg.min_episodes, "min_ess": cfg.min_ess, "confidence": cfg.confidence},
    }
    for old in folder.glob("shadow-*.json"):  # earlier contents of the store, or other settings
        old.unlink(missing_ok=True)
    path.write_text(json.dumps(out))
    return out


def _json_safe(v: Any) -> Any:
    """NaN and inf as None (strict JSON in the cache, ``—`` on the page)."""
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_safe(x) for x in v]
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, (np.integer, np.bool_)):
        return v.item()
    return v
