"""Where a label teaches the reward model most: the disagreement of a bootstrap reward ensemble.

The policy's entropy says where the *policy* hesitates, which is not where a person's answer carries
news: a policy can be torn between two equally good orderings of the same checks (high entropy,
nothing to learn) and sure of an action people would not take (no entropy, everything to learn).
Once the scenario has finished labels, the label queue asks the labels themselves:

* ``ensemble_members`` small reward models are trained, each on a bootstrap resample of the
  labelled *states* (every labelled action preferred over every other legal action of its state,
  the Bradley–Terry pairs the reward model is trained on, :func:`choice_pairs`);
* each member's scores of a candidate state's legal actions give its choice distribution
  ``p_m(a | s) = softmax over the legal actions of r_m(s, a)`` (the Bradley–Terry choice model);
* the state's disagreement is the information a label would bring about the ensemble
  (BALD): ``H(mean_m p_m) − mean_m H(p_m)`` in nats. It is high where the members are each sure
  but of different actions — where the labels so far do not decide — and low both where they
  agree and where every member is equally unsure (a coin toss that one more label would not
  settle). It is not divided by ``log(number of legal actions)``: a state with more legal actions
  has more to tell, and dividing would rank a two-way choice above an equally contested decision
  among four.

A run's budget (``max_items``) is then filled in two parts. ``1 − sample_fraction`` of it goes to
the most disagreeing states, at most ``ceil(that share / spread_clusters)`` per k-means state
cluster so that one region cannot take the whole batch; the rest is drawn at random from the
remaining candidate states with probability proportional to their disagreement. Taking only the
top of the ranking looks nowhere but where the current ensemble draws its boundary, and the
labelled set stops resembling the traffic the reward model will score (sampling bias: the model
then misjudges the common cases); drawing in proportion keeps every state with any disagreement in
play, most often those with the most, and leaves the states the labels already settle alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from rlops.model.reward_model import RewardModelConfig, train_reward_model
from rlops.pipeline_steps.labels.select import ClusterStat, choice_pairs, cluster_states, expected_outcomes
from rlops.trace_store.states import (
    mask_matrix,
    normalized_entropy,
    observations_from_traces,
    state_features,
)

if TYPE_CHECKING:
    from rlops.common.params_model import QueueConfig
    from rlops.model.reward_model import RewardModel
    from rlops.pipeline_steps.labels.select import ClusterStat
    from rlops.sandbox.pack import Pack

Tensor = torch.Tensor

MEMBER_HIDDEN = (64, 64)
"""Hidden widths of an ensemble member: the queue refits the ensemble every run on at most a few
thousand labels, where a smaller network than the registered reward model's fits as well."""
DISAGREEMENT = "disagreement"
SAMPLED = "sampled"


@dataclass(frozen=True)
class LabelledStates:
    """Finished labels as tensors: observations ``[N, D]``, legal masks ``[N, A]``, chosen actions ``[N]``."""

    obs: Tensor
    masks: Tensor
    chosen: Tensor

    def __len__(self) -> int:
        return int(self.chosen.shape[0])


# --------------------------------------------------------------------------- the ensemble
def fit_reward_ensemble(
    pack: Pack, labelled: LabelledStates, members: int, epochs: int, seed: int
) -> list[RewardModel]:
    """``members`` reward models, each trained on a bootstrap resample of the labelled states
    (members whose resample holds fewer than 2 pairs are left out)."""
    pairs, state_of_pair = choice_pairs(pack, labelled.obs, labelled.masks, labelled.chosen)
    gen = torch.Generator().manual_seed(seed)
    n = len(labelled)
    models = []
    for m in range(members):
        # Resample states, not pairs: a state's pairs stand or fall together.
        draw = torch.bincount(torch.randint(n, (n,), generator=gen), minlength=n)
        idx = torch.repeat_interleave(torch.arange(len(pairs)), draw[state_of_pair])
        if idx.numel() < 2:
            continue
        cfg = RewardModelConfig(
            hidden_sizes=MEMBER_HIDDEN, epochs=epochs, batch_size=128, holdout_fraction=0.0, seed=seed + m
        )
        models.append(train_reward_model(cfg, pairs.subset(idx))[0])
    return models


@torch.no_grad()
def choice_probabilities(pack: Pack, models: list[RewardModel], obs: Tensor, masks: Tensor) -> Tensor:
    """``[M, N, A]``: each member's Bradley–Terry choice distribution over the legal actions."""
    feats = obs[:, : pack.scenario.layout.n_features]
    out = expected_outcomes(pack)
    n, n_actions = feats.shape[0], pack.scenario.n_actions
    probs = []
    for model in models:
        model.eval()
        scores = torch.stack(
            [model(feats, torch.full((n,), a, dtype=torch.long), out[a].expand(n, -1)) for a in range(n_actions)], dim=1
        )
        probs.append(torch.softmax(scores.masked_fill(~masks, float("-inf")), dim=1))
    return torch.stack(probs) if probs else torch.zeros((0, n, n_actions))


def _entropy(p: Tensor) -> Tensor:
    return -(p * torch.log(p.clamp_min(1e-12))).sum(dim=-1)


def ensemble_disagreement(probs: Tensor, masks: Tensor) -> np.ndarray:
    """BALD disagreement per state, ``H(mean p) − mean H(p)`` in nats (between 0 and
    ``log(n legal)``; 0 for a state with one legal action, or with fewer than 2 members)."""
    if probs.shape[0] < 2:
        return np.zeros(masks.shape[0])
    mutual = _entropy(probs.mean(dim=0)) - _entropy(probs).mean(dim=0)
    mutual = torch.where(masks.sum(dim=1) > 1, mutual, torch.zeros_like(mutual))
    return mutual.clamp_min(0.0).numpy().astype(np.float64)


def state_disagreement(
    pack: Pack, labelled: LabelledStates, obs: Tensor, masks: Tensor, cfg: QueueConfig
) -> np.ndarray:
    """The ensemble disagreement of each candidate state, the ensemble fitted on ``labelled``."""
    models = fit_reward_ensemble(pack, labelled, cfg.ensemble_members, cfg.ensemble_epochs, cfg.seed + len(labelled))
    return ensemble_disagreement(choice_probabilities(pack, models, obs, masks), masks)


# --------------------------------------------------------------------------- the batch
def fill_budget(
    disagreement: np.ndarray, clusters: np.ndarray, budget: int, sample_fraction: float, spread_clusters: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(row indices, why)`` of one run's batch: the most disagreeing rows, at most
    ``ceil(share / spread_clusters)`` per cluster, then a draw from the rest with probability
    proportional to disagreement (a state without any is drawn only when nothing else is left)."""
    n = len(disagreement)
    budget = min(int(budget), n)
    share = budget - int(round(budget * float(sample_fraction)))
    cap = max(1, math.ceil(share / max(int(spread_clusters), 1)))
    taken: dict[int, int] = {}
    picked: list[int] = []
    for i in np.argsort(-disagreement, kind="stable"):
        if len(picked) >= share:
            break
        c = int(clusters[i])
        if taken.get(c, 0) < cap:
            taken[c] = taken.get(c, 0) + 1
            picked.append(int(i))
    rest = np.setdiff1d(np.arange(n), np.asarray(picked, dtype=np.int64))
    weight = np.clip(np.nan_to_num(disagreement[rest]), 0.0, None)
    # A floor far below any real disagreement: zero-disagreement states fill a budget only last.
    weight = weight + 1e-6 * max(float(weight.max(initial=0.0)), 1e-6)
    rng = np.random.default_rng(seed)
    drawn = rng.choice(rest, size=min(budget - len(picked), len(rest)), replace=False, p=weight / weight.sum())
    order = np.concatenate([np.asarray(picked, dtype=np.int64), drawn.astype(np.int64)])
    why = np.array([DISAGREEMENT] * len(picked) + [SAMPLED] * len(drawn), dtype=object)
    return order, why


def select_disagreeing(
    pack: Pack, df: pd.DataFrame, labelled: LabelledStates, cfg: QueueConfig
) -> tuple[pd.DataFrame, list[ClusterStat]]:
    """The rows to enqueue (``cluster_id``, ``cluster_entropy``, ``norm_entropy``, ``disagreement``,
    ``why``) and per-cluster statistics, for candidate trace rows ``df`` none of which is labelled yet."""
    masks_np = mask_matrix(df["action_mask"], pack.scenario.n_actions) if not df.empty else np.zeros((0, 1), bool)
    choice = masks_np.sum(axis=1) >= 2
    rows = (df if bool(choice.all()) else df.loc[choice]).reset_index(drop=True) if not df.empty else df
    if rows.empty:
        return rows.assign(cluster_id=[], cluster_entropy=[], norm_entropy=[], disagreement=[], why=[]), []
    obs, masks = observations_from_traces(pack, rows)
    score = state_disagreement(pack, labelled, obs, masks, cfg)
    entropy = (
        normalized_entropy(pd.to_numeric(rows["entropy"], errors="coerce").to_numpy(np.float64), masks.numpy())
        if "entropy" in rows.columns
        else np.zeros(len(rows))
    )
    clusters = cluster_states(
        state_features(pack, rows), cfg.clusters, cfg.seed, cfg.kmeans_iters, cfg.kmeans_fit_rows
    ).numpy()
    budget = cfg.max_items if cfg.max_items > 0 else cfg.states_per_cluster * max(cfg.top_k, 1)
    order, why = fill_budget(
        score, clusters, budget, cfg.sample_fraction, cfg.spread_clusters, cfg.seed + len(labelled)
    )
    frame = pd.DataFrame({"c": clusters, "e": entropy, "d": score})
    per = frame.groupby("c").agg(states=("e", "size"), entropy=("e", "mean"), disagreement=("d", "mean"))
    chosen = pd.Series(why, index=clusters[order]).groupby(level=0).agg(lambda w: ",".join(sorted(set(w))))
    stats = [
        ClusterStat(
            int(c),
            int(r.states),
            float(r.entropy),
            None,
            0,
            c in chosen.index,
            chosen.get(c, "not chosen"),
            float(r.disagreement),
        )
        for c, r in per.iterrows()
    ]
    out = rows.iloc[order].assign(
        cluster_id=clusters[order], norm_entropy=entropy[order], disagreement=score[order], why=why
    )
    out = out.assign(cluster_entropy=out["cluster_id"].map(per["entropy"]))
    return out.reset_index(drop=True), stats


__all__ = [
    "LabelledStates",
    "fit_reward_ensemble",
    "choice_probabilities",
    "ensemble_disagreement",
    "state_disagreement",
    "fill_budget",
    "select_disagreeing",
    "DISAGREEMENT",
    "SAMPLED",
]
