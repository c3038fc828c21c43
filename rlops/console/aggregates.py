"""Pure aggregation for the console: state clusters, transitions, top actions.

Nothing here reads storage or the registry; the inputs are frames and arrays that
:mod:`rlops.console.service` reads through :mod:`rlops.console.data`. Everything is vectorised
over rows, so a million trace rows aggregate in seconds, once per content digest.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import pandas as pd

LOW_QUANTILE = 0.25
TOP_ACTIONS = 3
EXAMPLES = 5
EDGES_PER_NODE = 3
END = -1  # the pseudo-cluster an episode's last step leads to


def digest(items: list[tuple[str, int, int]], *extra: str) -> str:
    """A short content key of a set of files (uri, size, mtime) plus extra words (version, k)."""
    h = hashlib.sha256()
    for uri, size, mtime in sorted(items):
        h.update(f"{uri}\0{size}\0{mtime}\n".encode())
    for e in extra:
        h.update(f"{e}\n".encode())
    return h.hexdigest()[:20]


def episode_order(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values(["episode_id", "step"], kind="stable").reset_index(drop=True)


def transitions(df: pd.DataFrame, labels: np.ndarray) -> pd.DataFrame:
    """Per row (sorted by episode, step): its cluster, its action and the next row's cluster
    (``END`` after an episode's last step). Aggregated to counts per (source, action, target)."""
    ep = df["episode_id"].to_numpy()
    nxt = np.full(len(df), END, dtype=np.int64)
    if len(df) > 1:
        same = ep[1:] == ep[:-1]
        nxt[:-1] = np.where(same, labels[1:], END)
    t = pd.DataFrame({"source": labels, "action": df["action"].astype(str).to_numpy(), "target": nxt})
    return t.groupby(["source", "action", "target"], sort=False).size().rename("count").reset_index()


def top_edges(trans: pd.DataFrame, per_node: int = EDGES_PER_NODE) -> list[dict[str, Any]]:
    ranked = trans.sort_values(["source", "count"], ascending=[True, False], kind="stable")
    kept = ranked.groupby("source", sort=False).head(per_node)
    return [
        {"source": int(r.source), "target": int(r.target), "action": str(r.action), "count": int(r.count)}
        for r in kept.itertuples(index=False)
    ]


def action_stats(actions: pd.Series, reward: pd.Series, rtg: pd.Series, top: int = TOP_ACTIONS) -> list[dict[str, Any]]:
    """The ``top`` most frequent actions with the mean and std of step reward and return-to-go."""
    g = pd.DataFrame({"action": actions.astype(str).to_numpy(), "r": reward.to_numpy(), "t": rtg.to_numpy()})
    agg = g.groupby("action").agg(
        steps=("r", "size"),
        mean_reward=("r", "mean"),
        std_reward=("r", "std"),
        mean_rtg=("t", "mean"),
        std_rtg=("t", "std"),
    )
    agg = agg.fillna(0.0).sort_values("steps", ascending=False, kind="stable").head(top)
    n = max(len(g), 1)
    return [
        {
            "action": str(a),
            "steps": int(r.steps),
            "share": float(r.steps) / n,
            "mean_reward": float(r.mean_reward),
            "std_reward": float(r.std_reward),
            "mean_return_to_go": float(r.mean_rtg),
            "std_return_to_go": float(r.std_rtg),
        }
        for a, r in agg.iterrows()
    ]


def low_score_drivers(
    comp_rtg: pd.DataFrame, low: np.ndarray, members: np.ndarray, refs: dict[str, str | None], top: int = 3
) -> list[dict[str, Any]]:
    """Among a cluster's low steps, how often each component is the most negative contribution."""
    if comp_rtg.empty or not low.any():
        return []
    sub = comp_rtg.loc[low]
    worst = sub.idxmin(axis=1)[sub.min(axis=1) < 0]
    n_low = int(low.sum())
    return [
        {
            "component": str(name),
            "rule_ref": refs.get(str(name)),
            "share_of_low_steps": int(n) / n_low,
            "mean_in_low_steps": float(sub[name].mean()),
            "mean_in_cluster": float(comp_rtg.loc[members, name].mean()),
        }
        for name, n in worst.value_counts().head(top).items()
    ]


def examples(df: pd.DataFrame, rtg: pd.Series, members: np.ndarray, k: int = EXAMPLES) -> list[dict[str, Any]]:
    """Trace ids of the cluster's lowest return-to-go steps, one per episode."""
    sub = pd.DataFrame(
        {
            "trace_id": df["trace_id"].to_numpy()[members],
            "episode_id": df["episode_id"].to_numpy()[members],
            "rtg": rtg.to_numpy()[members],
            "action": df["action"].astype(str).to_numpy()[members],
        }
    )
    sub = sub.sort_values("rtg", kind="stable").drop_duplicates("episode_id").head(k)
    return [
        {"trace_id": str(r.trace_id), "action": str(r.action), "return_to_go": float(r.rtg)}
        for r in sub.itertuples(index=False)
    ]


def node_stats(
    df: pd.DataFrame,
    labels: np.ndarray,
    reward: pd.Series,
    rtg: pd.Series,
    comp_rtg: pd.DataFrame,
    refs: dict[str, str | None],
    errors: np.ndarray,
) -> list[dict[str, Any]]:
    """One dict per cluster: traffic, low-reward and failure rates, top actions, drivers, examples."""
    threshold = float(rtg.quantile(LOW_QUANTILE)) if len(rtg) else 0.0
    is_low = (rtg <= threshold).to_numpy()
    step = pd.to_numeric(df["step"], errors="coerce").fillna(0).to_numpy()
    out = []
    for c in np.unique(labels):
        members = labels == c
        low = members & is_low
        n = int(members.sum())
        out.append(
            {
                "cluster": int(c),
                "steps": n,
                "share": n / max(len(df), 1),
                "low_steps": int(low.sum()),
                "low_rate": float(low.sum()) / n,
                "failure_rate": float(errors[members].mean()) if n else 0.0,
                "mean_step": float(step[members].mean()),
                "mean_reward": float(reward[members].mean()),
                "mean_return_to_go": float(rtg[members].mean()),
                "top_actions": action_stats(df["action"][members], reward[members], rtg[members]),
                "drivers": low_score_drivers(comp_rtg, low, members, refs),
                "examples": examples(df, rtg, members),
            }
        )
    return out


def layout(nodes: list[dict[str, Any]], width: int = 880, height: int = 460) -> dict[int, tuple[float, float, float]]:
    """(x, y, radius) per cluster: x by mean step (the flow runs left to right), nodes of similar
    step stacked, radius by the square root of traffic."""
    if not nodes:
        return {}
    steps = np.array([n["mean_step"] for n in nodes])
    lo, hi = float(steps.min()), float(steps.max())
    cols = np.round((steps - lo) / ((hi - lo) or 1.0) * 5).astype(int)
    biggest = max(n["steps"] for n in nodes)
    pos: dict[int, tuple[float, float, float]] = {}
    for col in np.unique(cols):
        members = [n for n, c in zip(nodes, cols) if c == col]
        members.sort(key=lambda n: -n["steps"])
        for i, n in enumerate(members):
            x = 70 + col * (width - 230) / 5
            y = height * (i + 1) / (len(members) + 1) + (12 if col % 2 else -12) * (len(members) > 1)
            pos[n["cluster"]] = (float(x), float(y), 10 + 28 * math.sqrt(n["steps"] / biggest))
    return pos


def colour(rate: float) -> str:
    """Green (0) through amber to red (≥ 0.5) for a low-reward or failure rate."""
    t = min(max(rate / 0.5, 0.0), 1.0)
    r, g = (int(60 + 180 * min(2 * t, 1.0)), int(170 - 110 * max(2 * t - 1, 0.0)))
    return f"#{r:02x}{g:02x}50"


def nearest(X: np.ndarray, centroids: np.ndarray, chunk: int = 200_000) -> np.ndarray:
    """Index of the nearest centroid of every row of ``X`` (chunked squared distances)."""
    out = np.empty(len(X), dtype=np.int64)
    c2 = (centroids**2).sum(axis=1)
    for i in range(0, len(X), chunk):
        x = X[i : i + chunk]
        out[i : i + chunk] = np.argmin(c2[None, :] - 2.0 * x @ centroids.T, axis=1)
    return out


# --------------------------------------------------------------------------- untrusted trace fields
def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def breakdown_items(raw: Any) -> list[dict[str, Any]]:
    """The reward breakdown of one trace row as ``[{component, score, rule_ref, reason}]``, whatever
    shape the row carries: the sandbox's ``{"total", "breakdown": [...]}``, a bare list of components
    (what an SDK episode writes for a dict-valued reward), or ``{component: score}``. Items that are
    not a named finite score, or carry text that is not Unicode (a lone surrogate, which JSON's
    ``\\ud800`` escapes can spell), are left out; text that is not JSON gives no components."""
    import json

    if isinstance(raw, (bytes, str)):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return []
    if isinstance(raw, dict):
        inner = raw.get("breakdown")
        if isinstance(inner, list):
            raw = inner
        elif inner is None:
            raw = [{"component": k, "score": v} for k, v in raw.items() if k not in ("total", "reward_total")]
        else:
            return []
    if not isinstance(raw, list):
        return []
    out = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("component"), (str, int)):
            continue
        try:
            score = float(item["score"])
        except (KeyError, TypeError, ValueError):
            continue
        if not math.isfinite(score):
            continue
        ref, reason = item.get("rule_ref"), item.get("reason")
        if not all(_unicode(t) for t in (item["component"], ref, reason) if isinstance(t, str)):
            continue
        out.append(
            {
                "component": str(item["component"]),
                "score": score,
                "rule_ref": ref if isinstance(ref, str) else None,
                "reason": reason if isinstance(reason, str) else "",
            }
        )
    return out
