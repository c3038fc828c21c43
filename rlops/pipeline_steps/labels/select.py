"""The computations of the label queue (see :mod:`rlops.pipeline_steps.labels.step`): k-means over encoded
states and the clusters' names in words (which the console's and what-if's decision maps show too),
the selection of uncertain clusters, label items, Label Studio tasks and annotations, and labels as
reward-model pairs or an imitation batch."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from rlops.model.reward_model import PreferencePairs
from rlops.pipeline_steps.labels import importing
from rlops.trace_store.states import (
    STATE_PREFIX,
    action_codes,
    mask_matrix,
    normalized_entropy,
    state_features,
    states_from_traces,
)
from rlops.trace_store.time_partitions import parse_ts

if TYPE_CHECKING:
    from rlops.common.params_model import QueueConfig
    from rlops.model.reward_model import PreferencePairs
    from rlops.sandbox.pack import Pack

Tensor = torch.Tensor


# --------------------------------------------------------------------------- clustering
def kmeans(X: Tensor, k: int, seed: int = 0, iters: int = 50) -> tuple[Tensor, Tensor]:
    """``(labels [N], centroids [k', D])`` by Lloyd's algorithm with k-means++ seeding
    (``k' = min(k, distinct points)``); deterministic for a given ``seed``."""
    X = X.float()
    n = X.shape[0]
    if n == 0:
        return torch.zeros(0, dtype=torch.long), torch.zeros((0, X.shape[1]))
    gen = torch.Generator().manual_seed(seed)
    k = _distinct_rows_up_to(X, k)
    cent = X[torch.randint(n, (1,), generator=gen)]
    d2 = torch.cdist(X, cent).squeeze(1) ** 2
    for _ in range(1, k):
        nxt = (
            torch.multinomial(d2 / d2.sum(), 1, generator=gen)
            if float(d2.sum()) > 0
            else torch.randint(n, (1,), generator=gen)
        )
        cent = torch.cat([cent, X[nxt]])
        d2 = torch.minimum(d2, (torch.cdist(X, X[nxt]).squeeze(1)) ** 2)
    labels = torch.cdist(X, cent).argmin(dim=1)
    for _ in range(iters):
        sums = torch.zeros_like(cent).index_add_(0, labels, X)
        counts = torch.bincount(labels, minlength=cent.shape[0]).unsqueeze(1)
        cent = torch.where(counts > 0, sums / counts.clamp_min(1), cent)
        new = torch.cdist(X, cent).argmin(dim=1)
        if torch.equal(new, labels):
            break
        labels = new
    return labels, cent


def cluster_states(X: Tensor, k: int, seed: int = 0, iters: int = 50, fit_rows: int = 0) -> Tensor:
    """Cluster labels of the states ``X``: :func:`kmeans` over them all, or, past ``fit_rows`` rows
    (0: never), k-means fitted on ``fit_rows`` evenly spaced rows (a systematic sample of the
    window, deterministic) and every row given its nearest centroid — what the fit's own labels
    are, so a window within ``fit_rows`` is clustered exactly as before."""
    n = X.shape[0]
    if not fit_rows or n <= fit_rows:
        return kmeans(X, k, seed, iters)[0]
    idx = torch.from_numpy(np.linspace(0, n - 1, fit_rows).round().astype(np.int64))
    _, cent = kmeans(X[idx], k, seed, iters)
    return nearest_centroid(X, cent)


def nearest_centroid(X: Tensor, cent: Tensor, chunk: int = 262_144) -> Tensor:
    """Each row's nearest centroid, a chunk of rows at a time (bounded memory)."""
    if X.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat([torch.cdist(X[i : i + chunk].float(), cent).argmin(dim=1) for i in range(0, X.shape[0], chunk)])


def cluster_names(features: list[tuple[str, str, pd.Series]], labels: np.ndarray, top: int = 2) -> dict[int, str]:
    """A short name per cluster from its dominant state features: ``features`` are
    ``(path, kind, column)`` with kind ``number`` or ``category``;
    a numeric field reads ``high <leaf>`` / ``low <leaf>`` (cluster median against the overall
    median, in overall standard deviations), a category ``<leaf> <value>`` when its share in the
    cluster beats the overall share. The ``top`` most distinctive make the name; names that
    would repeat get the cluster number."""
    scores: dict[int, list[tuple[float, str]]] = {int(c): [] for c in np.unique(labels)}
    for path, kind, col in features:
        leaf = path.rsplit(".", 1)[-1].replace("_", " ")
        if kind == "number":
            x = pd.to_numeric(col, errors="coerce").astype("float64")  # nullable ints: NA → NaN
            spread = float(x.std()) if x.notna().sum() > 1 else 1.0
            spread = spread if np.isfinite(spread) and spread > 0 else 1.0
            overall = float(x.median()) if x.notna().any() else 0.0
            med = x.groupby(labels).median()
            for c, m in med.items():
                if np.isfinite(m):
                    scores[int(c)].append((abs(m - overall) / spread, f"{'high' if m > overall else 'low'} {leaf}"))
        else:
            text = col.astype(str).where(col.notna(), None)
            base = text.value_counts(normalize=True)
            for c, grp in text.groupby(labels):
                mode = grp.dropna().mode()
                if mode.empty:
                    continue
                value = str(mode.iloc[0])
                share = float((grp == value).mean())
                words = (
                    leaf
                    if value.lower() in ("true", "1")
                    else f"{leaf}: no"
                    if value.lower() in ("false", "0")
                    else f"{leaf} {value}"
                )
                scores[int(c)].append((2.5 * (share - float(base.get(value, 0.0))), words))
    names: dict[int, str] = {}
    for c, scored in scores.items():
        best = [w for s, w in sorted(scored, key=lambda t: -t[0])[:top] if s > 0.05] or [
            w for _, w in sorted(scored, key=lambda t: -t[0])[:1]
        ]
        names[c] = ", ".join(best) or f"cluster {c}"
    seen: dict[str, int] = {}
    for name in names.values():
        seen[name] = seen.get(name, 0) + 1
    return {c: (f"{n} (#{c})" if seen[n] > 1 else n) for c, n in names.items()}


def _distinct_rows_up_to(X: Tensor, k: int, head: int = 4096) -> int:
    """``min(k, distinct rows of X)``, sorting the first ``head`` rows only when they already hold
    ``k`` distinct ones (sorting every row of a large sample costs more than the clustering)."""
    if int(torch.unique(X[:head], dim=0).shape[0]) >= k:
        return k
    return min(k, int(torch.unique(X, dim=0).shape[0]))


@dataclass(frozen=True)
class ClusterStat:
    cluster_id: int
    states: int
    mean_entropy: float
    min_bucket_entropy: float | None
    buckets_judged: int
    selected: bool
    why: str = ""
    """``threshold`` (uncertain in every judged bucket), ``top_k`` (among the run's most uncertain
    clusters), or why not (``too few states``, ``below threshold``); under reward-ensemble
    selection ``disagreement`` and/or ``explore`` (see :mod:`rlops.pipeline_steps.labels.disagreement`)
    or ``not chosen``."""
    mean_disagreement: float | None = None
    """Mean reward-ensemble disagreement of the cluster's states (None under entropy selection)."""


def select_uncertain(pack: Pack, df: pd.DataFrame, cfg: QueueConfig) -> tuple[pd.DataFrame, list[ClusterStat]]:
    """The rows to enqueue (with ``cluster_id``, ``cluster_entropy``, ``norm_entropy``) and the
    per-cluster statistics. ``df`` holds trace rows (``state.*``, ``action_mask``, ``entropy``, ``ts``)."""
    if df.empty:
        return df.assign(cluster_id=[], cluster_entropy=[], norm_entropy=[]), []
    masks = mask_matrix(df["action_mask"], pack.scenario.n_actions)
    choice = masks.sum(axis=1) >= 2
    rows = (df if bool(choice.all()) else df.loc[choice]).reset_index(drop=True)
    if rows.empty:
        return rows.assign(cluster_id=[], cluster_entropy=[], norm_entropy=[]), []
    ent = normalized_entropy(pd.to_numeric(rows["entropy"], errors="coerce").to_numpy(np.float64), masks[choice])
    labels = cluster_states(state_features(pack, rows), cfg.clusters, cfg.seed, cfg.kmeans_iters, cfg.kmeans_fit_rows)
    ts = parse_ts(rows["ts"])
    frame = pd.DataFrame({"c": labels.numpy(), "e": ent, "b": ts.dt.floor(f"{int(cfg.bucket_minutes)}min")})
    overall = frame.groupby("c")["e"].agg(["mean", "size"])
    per_bucket = frame.groupby(["c", "b"])["e"].agg(["mean", "size"])
    judged = per_bucket[per_bucket["size"] >= cfg.min_bucket_states]
    min_bucket = judged.groupby(level="c")["mean"].min()
    n_judged = judged.groupby(level="c").size()
    # Clusters large enough to judge; of those, the ones over the threshold in every judged bucket,
    # plus the top_k by mean entropy (a confident policy still has its least certain states).
    big = [int(c) for c, row in overall.iterrows() if row["size"] >= cfg.min_cluster_states and c in min_bucket.index]
    ranked = sorted(big, key=lambda c: (-float(overall.loc[c, "mean"]), c))[: max(int(cfg.top_k), 0)]
    stats, keep = [], []
    for c, row in overall.iterrows():  # one iteration per cluster (k of them), not per state
        mb = float(min_bucket[c]) if c in min_bucket.index else None
        why = (
            "too few states"
            if int(c) not in big
            else "threshold"
            if mb is not None and mb > cfg.threshold
            else "top_k"
            if int(c) in ranked
            else "below threshold"
        )
        ok = why in ("threshold", "top_k")
        stats.append(ClusterStat(int(c), int(row["size"]), float(row["mean"]), mb, int(n_judged.get(c, 0)), ok, why))
        if ok:
            keep.append(int(c))
    out = rows.assign(cluster_id=labels.numpy(), norm_entropy=ent, _ts=ts)
    out = out[out["cluster_id"].isin(keep)]
    out = out.assign(cluster_entropy=out["cluster_id"].map(overall["mean"]))
    out = (
        out.sort_values(["cluster_id", "_ts", "episode_id", "step"], ascending=[True, False, True, True], kind="stable")
        .groupby("cluster_id", sort=True)
        .head(cfg.states_per_cluster)
    )
    out = out.drop(columns="_ts").reset_index(drop=True)
    return (_round_robin(out, ranked, cfg.max_items) if cfg.max_items > 0 else out), stats


def _round_robin(out: pd.DataFrame, ranked: list[int], budget: int) -> pd.DataFrame:
    """At most ``budget`` rows, taken in turns from the selected clusters (most uncertain cluster
    first in each turn, each cluster's latest states first), so that every cluster gets its share."""
    rank = {c: i for i, c in enumerate(ranked)}
    turn = out.groupby("cluster_id", sort=False).cumcount()
    order = pd.DataFrame({"turn": turn, "rank": out["cluster_id"].map(lambda c: rank.get(int(c), len(rank) + int(c)))})
    keep = order.sort_values(["turn", "rank"], kind="stable").index[: int(budget)]
    return out.loc[keep].reset_index(drop=True)


# --------------------------------------------------------------------------- items
def item_id(scenario: str, episode_id: str, step: Any) -> str:
    return hashlib.sha256(f"{scenario}|{episode_id}|{int(step)}".encode()).hexdigest()[:40]


def queue_items(pack: Pack, scenario: str, rows: pd.DataFrame, all_rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Label items for ``rows``: visible state, legal actions, and the episode's earlier actions
    (looked up in ``all_rows``) so the policy's observation can be rebuilt."""
    names = pack.scenario.action_names
    masks = mask_matrix(rows["action_mask"], pack.scenario.n_actions)
    state_cols = [c for c in rows.columns if c.startswith(STATE_PREFIX)]
    states = rows[state_cols].astype(object).where(rows[state_cols].notna(), None)
    states.columns = [c[len(STATE_PREFIX) :] for c in state_cols]
    hist = _histories(pack, rows, all_rows)
    out = []
    for i, (rec, r) in enumerate(zip(states.to_dict("records"), rows.itertuples(index=False))):
        out.append(
            {
                "item_id": item_id(scenario, r.episode_id, r.step),
                "cluster_id": r.cluster_id,
                "cluster_entropy": r.cluster_entropy,
                "norm_entropy": r.norm_entropy,
                "trace_id": getattr(r, "trace_id", None),
                "episode_id": r.episode_id,
                "step": int(r.step),
                "ts": getattr(r, "ts", None),
                "policy_version": getattr(r, "policy_version", None),
                "action_taken": getattr(r, "action", None),
                "state": _jsonable(rec),
                "candidate_actions": [names[a] for a in np.flatnonzero(masks[i])],
                "action_mask": r.action_mask,
                "history": hist[i],
            }
        )
    return out


def _histories(pack: Pack, rows: pd.DataFrame, all_rows: pd.DataFrame) -> list[list[str]]:
    """The actions taken earlier in each row's episode (oldest first, at most ``history_len``)."""
    k = pack.scenario.layout.history_len
    eps = all_rows[all_rows["episode_id"].isin(rows["episode_id"])][["episode_id", "step", "action"]]
    by_ep = {e: g.sort_values("step") for e, g in eps.groupby("episode_id")}
    out = []
    for e, s in zip(rows["episode_id"], rows["step"]):
        g = by_ep.get(e)
        out.append([] if g is None else g.loc[g["step"] < s, "action"].astype(str).tolist()[-k:])
    return out


def _jsonable(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in rec.items()}


# --------------------------------------------------------------------------- Label Studio
def label_config(pack: Pack) -> str:
    """Label Studio labelling config: the state as text, one single choice among the actions."""
    choices = "".join(f'<Choice value="{a}"/>' for a in pack.scenario.action_names)
    return (
        '<View><Header value="Which action should the agent take in this state?"/>'
        '<Text name="state" value="$state_text"/><Text name="legal" value="$legal_text"/>'
        f'<Choices name="action" toName="state" choice="single" required="true">{choices}</Choices></View>'
    )


def display_value(pack: Pack | None, path: str, value: Any) -> str:
    """A state value as a labeller reads it: numbers rounded (thousands separated) with the
    field's unit (``6,415.46 CNY``, ``42 years``), bools as yes/no, missing as —."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    spec = pack.scenario.fields.get(path) if pack is not None else None
    unit = f" {spec.unit}" if spec is not None and getattr(spec, "unit", None) else ""
    if isinstance(value, bool) or (spec is not None and spec.type == "bool"):
        return "yes" if value in (True, 1, 1.0, "true", "True") else "no"
    if isinstance(value, (int, float, np.number)):
        v = float(value)
        if (spec is not None and spec.type == "int") or v.is_integer():
            return f"{int(round(v)):,}{unit}"
        text = f"{v:,.2f}" if abs(v) >= 1 else f"{v:.3g}"
        return text + unit
    return str(value)


def to_tasks(items: pd.DataFrame, pack: Pack | None = None) -> list[dict[str, Any]]:
    tasks = []
    for r in items.itertuples(index=False):
        state = json.loads(r.state)
        legal = json.loads(r.candidate_actions)
        text = "\n".join(f"{k}: {display_value(pack, k, v)}" for k, v in state.items())
        tasks.append(
            {
                "data": {
                    "item_id": r.item_id,
                    "state": state,
                    "state_text": text,
                    "candidate_actions": legal,
                    "legal_text": "Legal actions: " + ", ".join(legal),
                    "policy_action": r.action_taken,
                    "cluster_id": r.cluster_id,
                    "norm_entropy": r.norm_entropy,
                },
                "meta": {"trace_id": r.trace_id, "episode_id": r.episode_id, "step": r.step},
            }
        )
    return tasks


def parse_annotations(tasks: Any, items: pd.DataFrame, choice_name: str = "action") -> Any:
    """Reading an export has one home, :func:`rlops.pipeline_steps.labels.importing.parse_annotations`
    (task checks, every annotator's answer, conflicts): ``(labels, rejected, not_annotated, conflicts)``."""
    return importing.parse_annotations(tasks, items, choice_name)


# --------------------------------------------------------------------------- training inputs
def _item_states(pack: Pack, labels: pd.DataFrame) -> tuple[Tensor, Tensor, Tensor]:
    """Observations ``[N, D]``, masks ``[N, A]`` and state tensors of labelled items."""
    states = pd.DataFrame([json.loads(s) for s in labels["state"]], index=labels.index)
    df = states.add_prefix(STATE_PREFIX).assign(
        step=labels["step"].fillna(0).to_numpy(), action_mask=labels["action_mask"].to_numpy()
    )
    S = states_from_traces(pack, df)
    k = pack.scenario.layout.history_len
    hist = torch.zeros((len(df), k), dtype=torch.long)
    for i, h in enumerate(labels["history"].fillna("[]")):
        names = json.loads(h)[-k:]
        if names:
            codes = action_codes(pack, pd.Series(names)) + 1
            hist[i, k - len(codes) :] = torch.from_numpy(codes)
            S[i, pack.scenario.columns["episode.last_action"]] = float(codes[-1])
    masks = torch.from_numpy(mask_matrix(df["action_mask"], pack.scenario.n_actions))
    return pack.scenario.encode(S, masks, hist), masks, S


def expected_outcomes(pack: Pack) -> Tensor:
    """Per action ``[declared latency s, 0 (no error), ends the episode]`` — the reward model's
    outcome features for a labelled choice whose outcome was never observed."""
    rows = [[a.latency_mean_ms / 1000.0, 0.0, 1.0 if a.terminal is True else 0.0] for a in pack.scenario.spec.actions]
    return torch.tensor(rows, dtype=torch.float32)


def choice_pairs(pack: Pack, obs: Tensor, masks: Tensor, chosen: Tensor) -> tuple[PreferencePairs, Tensor]:
    """``(pairs, state_of_pair)``: in each labelled state (observation ``obs``, legal ``masks``) the
    chosen action preferred over every other legal action; ``state_of_pair`` is the row of
    ``obs`` each pair comes from (what a bootstrap over labelled states resamples)."""
    chosen = chosen.long()
    others = masks.clone()
    others[torch.arange(len(chosen)), chosen] = False
    row, rej = others.nonzero(as_tuple=True)
    feats = obs[:, : pack.scenario.layout.n_features]
    out = expected_outcomes(pack)
    pairs = PreferencePairs(feats[row], chosen[row], rej, out[chosen[row]], out[rej], n_actions=pack.scenario.n_actions)
    return pairs, row


def labels_as_pairs(pack: Pack, labels: pd.DataFrame) -> PreferencePairs:
    """Reward-model pairs: each labelled action preferred over every other legal action of its
    state (``labels`` as :meth:`LabelStore.labelled_frame` returns it)."""
    obs, masks, _ = _item_states(pack, labels)
    return choice_pairs(pack, obs, masks, torch.from_numpy(action_codes(pack, labels["label"])))[0]


def labels_as_choices(pack: Pack, labels: pd.DataFrame) -> tuple[Tensor, Tensor, Tensor]:
    """``(obs, masks, chosen)`` of finished labels: the labelled states and the labellers' actions."""
    obs, masks, _ = _item_states(pack, labels)
    return obs, masks, torch.from_numpy(action_codes(pack, labels["label"]))


@dataclass
class ImitationBatch:
    """Observations, the labelled actions and the masks, for a cross-entropy imitation term."""

    obs: Tensor
    actions: Tensor
    masks: Tensor
    item_ids: list[str]


def labels_as_imitation_batch(pack: Pack, labels: pd.DataFrame) -> ImitationBatch:
    obs, masks, _ = _item_states(pack, labels)
    return ImitationBatch(
        obs, torch.from_numpy(action_codes(pack, labels["label"])), masks, labels["item_id"].astype(str).tolist()
    )
