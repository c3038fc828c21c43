"""The reward model: ``(state features, action, outcome features) → scalar``.

Trained from pairwise preferences with the Bradley–Terry loss
``−log σ(r_chosen − r_rejected − margin)`` (plus an optional centring term
``center_coef · (r_chosen + r_rejected)²`` that pins the free offset of the scores near 0), or by
regression (MSE) against observed reward totals. :func:`score` labels batches of historical
steps. Preference pairs from sandbox rollouts come from :mod:`rlops.model.reward_pairs`.

Inputs are the sandbox encoding of a state (the ``features`` part of an observation), the action
index, and outcome features of the step (by default ``[latency seconds, error, done]``, which
both sandbox simulations and production traces record).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rlops.common.reward_model_config import RewardModelConfig

WEIGHTS_FILE = "reward_model.pt"
CONFIG_FILE = "reward_model.json"
_FORMAT = 1


@dataclass
class PreferencePairs:
    """Pairs of actions in the same state, ``chosen`` preferred over ``rejected``.

    ``chosen_value``/``rejected_value`` hold the true expected rewards when they are known
    (sandbox pairs) and are used for the rank-correlation metric.
    """

    states: Tensor
    chosen: Tensor
    rejected: Tensor
    chosen_outcomes: Tensor
    rejected_outcomes: Tensor
    chosen_value: Tensor | None = None
    rejected_value: Tensor | None = None
    n_actions: int = 0
    """Size of the action set (0: the largest action index seen + 1)."""

    def __len__(self) -> int:
        return int(self.states.shape[0])

    def subset(self, idx: Tensor) -> PreferencePairs:
        def pick(t: Tensor | None) -> Tensor | None:
            return None if t is None else t[idx]

        return PreferencePairs(
            states=self.states[idx],
            chosen=self.chosen[idx],
            rejected=self.rejected[idx],
            chosen_outcomes=self.chosen_outcomes[idx],
            rejected_outcomes=self.rejected_outcomes[idx],
            chosen_value=pick(self.chosen_value),
            rejected_value=pick(self.rejected_value),
            n_actions=self.n_actions,
        )

    @classmethod
    def cat(cls, parts: list[PreferencePairs]) -> PreferencePairs:
        """One set of pairs from several (true values kept only when every part has them)."""

        def join(name: str) -> Tensor:
            return torch.cat([getattr(p, name) for p in parts])

        def join_known(name: str) -> Tensor | None:
            vals = [getattr(p, name) for p in parts]
            return None if any(v is None for v in vals) else torch.cat(vals)

        return cls(
            states=join("states"),
            chosen=join("chosen"),
            rejected=join("rejected"),
            chosen_outcomes=join("chosen_outcomes"),
            rejected_outcomes=join("rejected_outcomes"),
            chosen_value=join_known("chosen_value"),
            rejected_value=join_known("rejected_value"),
            n_actions=max(p.n_actions for p in parts),
        )


@dataclass
class RewardDataset:
    """Observed steps with their reward totals, for the regression option."""

    states: Tensor
    actions: Tensor
    outcomes: Tensor
    rewards: Tensor
    n_actions: int = 0
    """Size of the action set (0: the largest action index seen + 1)."""

    def __len__(self) -> int:
        return int(self.states.shape[0])

    def subset(self, idx: Tensor) -> RewardDataset:
        return RewardDataset(
            states=self.states[idx],
            actions=self.actions[idx],
            outcomes=self.outcomes[idx],
            rewards=self.rewards[idx],
            n_actions=self.n_actions,
        )


@dataclass
class RewardModelMetrics:
    """Held-out quality of a trained reward model."""

    n_train: int
    n_heldout: int
    heldout_pairwise_accuracy: float
    train_pairwise_accuracy: float
    spearman: float
    heldout_loss: float
    history: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, float]:
        d = asdict(self)
        d.pop("history")
        return d


class RewardModel(nn.Module):
    """MLP over ``[state features | one-hot action | outcome features]``."""

    def __init__(self, n_features: int, n_actions: int, n_outcome: int, hidden_sizes: tuple[int, ...] = (128, 128)):
        super().__init__()
        self.n_features, self.n_actions, self.n_outcome = n_features, n_actions, n_outcome
        self.hidden_sizes = tuple(hidden_sizes)
        sizes = [n_features + n_actions + n_outcome, *self.hidden_sizes, 1]
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(nn.SiLU())
        self.net = nn.Sequential(*layers)

    def spec(self) -> dict[str, Any]:
        return {
            "n_features": self.n_features,
            "n_actions": self.n_actions,
            "n_outcome": self.n_outcome,
            "hidden_sizes": list(self.hidden_sizes),
        }

    def forward(self, states: Tensor, actions: Tensor, outcomes: Tensor | None = None) -> Tensor:
        parts = [states.float(), F.one_hot(actions.long(), self.n_actions).float()]
        if self.n_outcome:
            if outcomes is None:
                raise ValueError(f"this reward model scores outcomes too: pass outcomes [N, {self.n_outcome}]")
            parts.append(outcomes.float())
        score: Tensor = self.net(torch.cat(parts, dim=-1)).squeeze(-1)
        return score


# ---------------------------------------------------------------------------- losses and metrics
def bradley_terry_loss(r_chosen: Tensor, r_rejected: Tensor, margin: float = 0.0, center_coef: float = 0.0) -> Tensor:
    """``mean(−log σ(r_c − r_r − margin)) + center_coef · mean((r_c + r_r)²)``."""
    loss = -F.logsigmoid(r_chosen - r_rejected - margin).mean()
    if center_coef:
        loss = loss + center_coef * (r_chosen + r_rejected).pow(2).mean()
    return loss


def _ranks(x: Tensor) -> Tensor:
    """Ranks 1..n with ties given their average rank."""
    order = torch.argsort(x, stable=True)
    ranks = torch.empty_like(x, dtype=torch.float64)
    ranks[order] = torch.arange(1, x.numel() + 1, dtype=torch.float64)
    _, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
    sums = torch.zeros(counts.numel(), dtype=torch.float64).index_add_(0, inverse, ranks)
    mean_ranks: Tensor = (sums / counts)[inverse]
    return mean_ranks


def spearman(a: Tensor, b: Tensor) -> float:
    """Spearman rank correlation of two 1-d tensors (NaN when either is constant)."""
    ra, rb = _ranks(a.detach().double().cpu()), _ranks(b.detach().double().cpu())
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = math.sqrt(float((ra * ra).sum()) * float((rb * rb).sum()))
    return float((ra * rb).sum()) / denom if denom > 0 else float("nan")


@torch.no_grad()
def pairwise_accuracy(model: RewardModel, pairs: PreferencePairs) -> float:
    if len(pairs) == 0:
        return float("nan")
    rc = model(pairs.states, pairs.chosen, pairs.chosen_outcomes)
    rr = model(pairs.states, pairs.rejected, pairs.rejected_outcomes)
    return float((rc > rr).float().mean())


@torch.no_grad()
def score(
    model: RewardModel, states: Tensor, actions: Tensor, outcomes: Tensor | None = None, batch_size: int = 65536
) -> Tensor:
    """Reward-model scores ``[N]`` for a batch of steps (for labelling historical traces)."""
    model.eval()
    out = [
        model(
            states[i : i + batch_size],
            actions[i : i + batch_size],
            None if outcomes is None else outcomes[i : i + batch_size],
        )
        for i in range(0, states.shape[0], batch_size)
    ]
    return torch.cat(out) if out else torch.zeros(0)


# ---------------------------------------------------------------------------- training
def train_reward_model(
    cfg: RewardModelConfig, data: PreferencePairs | RewardDataset
) -> tuple[RewardModel, RewardModelMetrics]:
    """Fit a reward model; returns it with held-out metrics (pairwise accuracy, Spearman ρ)."""
    pairwise = cfg.loss == "pairwise"
    if pairwise and not isinstance(data, PreferencePairs):
        raise TypeError(
            "RewardModelConfig.loss is 'pairwise' but the data is not PreferencePairs; build pairs "
            "with rlops.model.reward_pairs.build_preference_pairs or use loss='regression'"
        )
    if isinstance(data, PreferencePairs) and not pairwise:
        if data.chosen_value is None or data.rejected_value is None:
            raise ValueError("regression on preference pairs needs their true values (chosen_value/rejected_value)")
        data = _pairs_as_dataset(data)
    n = len(data)
    if n < 2:
        raise ValueError(f"need at least 2 training examples for the reward model, got {n}")
    torch.manual_seed(cfg.seed)
    gen = torch.Generator().manual_seed(cfg.seed)
    perm = torch.randperm(n, generator=gen)
    n_hold = int(round(n * cfg.holdout_fraction))
    held, tr = data.subset(perm[:n_hold]), data.subset(perm[n_hold:])
    n_actions = data.n_actions or _max_action(data) + 1
    outcomes = data.chosen_outcomes if isinstance(data, PreferencePairs) else data.outcomes
    model = RewardModel(data.states.shape[1], n_actions, outcomes.shape[1], cfg.hidden_sizes)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    steps_per_epoch = max(math.ceil(len(tr) / cfg.batch_size), 1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.epochs * steps_per_epoch)
    history: list[float] = []
    for _ in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(tr), generator=gen)
        total = torch.zeros(())
        for start in range(0, len(tr), cfg.batch_size):
            loss = _loss(model, tr.subset(order[start : start + cfg.batch_size]), cfg)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.detach()
        history.append(float(total) / steps_per_epoch)
    model.eval()
    return model, _metrics(model, tr, held, cfg, history)


def _max_action(data: PreferencePairs | RewardDataset) -> int:
    if isinstance(data, PreferencePairs):
        return int(torch.maximum(data.chosen.max(), data.rejected.max()))
    return int(data.actions.max())


def _pairs_as_dataset(p: PreferencePairs) -> RewardDataset:
    assert p.chosen_value is not None and p.rejected_value is not None
    return RewardDataset(
        states=torch.cat([p.states, p.states]),
        actions=torch.cat([p.chosen, p.rejected]),
        outcomes=torch.cat([p.chosen_outcomes, p.rejected_outcomes]),
        rewards=torch.cat([p.chosen_value, p.rejected_value]),
        n_actions=p.n_actions,
    )


def _loss(model: RewardModel, batch: PreferencePairs | RewardDataset, cfg: RewardModelConfig) -> Tensor:
    if isinstance(batch, PreferencePairs):
        rc = model(batch.states, batch.chosen, batch.chosen_outcomes)
        rr = model(batch.states, batch.rejected, batch.rejected_outcomes)
        return bradley_terry_loss(rc, rr, cfg.margin, cfg.center_coef)
    return F.mse_loss(model(batch.states, batch.actions, batch.outcomes), batch.rewards.float())


@torch.no_grad()
def _metrics(
    model: RewardModel,
    tr: PreferencePairs | RewardDataset,
    held: PreferencePairs | RewardDataset,
    cfg: RewardModelConfig,
    history: list[float],
) -> RewardModelMetrics:
    evald = held if len(held) else tr
    if isinstance(evald, PreferencePairs):
        assert isinstance(tr, PreferencePairs)
        rho = float("nan")
        if evald.chosen_value is not None and evald.rejected_value is not None:
            s = torch.cat(
                [
                    score(model, evald.states, evald.chosen, evald.chosen_outcomes),
                    score(model, evald.states, evald.rejected, evald.rejected_outcomes),
                ]
            )
            rho = spearman(s, torch.cat([evald.chosen_value, evald.rejected_value]))
        return RewardModelMetrics(
            n_train=len(tr),
            n_heldout=len(held),
            heldout_pairwise_accuracy=pairwise_accuracy(model, evald),
            train_pairwise_accuracy=pairwise_accuracy(model, tr),
            spearman=rho,
            heldout_loss=float(_loss(model, evald, cfg)),
            history=history,
        )
    s = score(model, evald.states, evald.actions, evald.outcomes)
    # Rows of a regression set are not paired by state: accuracy is the ordering agreement on random
    # pairs of held-out rows whose rewards differ.
    g = torch.Generator().manual_seed(cfg.seed + 1)
    i, j = torch.randint(len(evald), (2, min(100_000, len(evald) * 10)), generator=g)
    differ = evald.rewards[i] != evald.rewards[j]
    agree = ((s[i] > s[j]) == (evald.rewards[i] > evald.rewards[j]))[differ]
    acc = float(agree.float().mean()) if agree.numel() else float("nan")
    return RewardModelMetrics(
        n_train=len(tr),
        n_heldout=len(held),
        heldout_pairwise_accuracy=acc,
        train_pairwise_accuracy=float("nan"),
        spearman=spearman(s, evald.rewards),
        heldout_loss=float(_loss(model, evald, cfg)),
        history=history,
    )


# ---------------------------------------------------------------------------- save / load
def save_reward_model(model: RewardModel, directory: str | Path, metadata: dict[str, Any] | None = None) -> Path:
    """Write ``reward_model.pt`` (state dict) and ``reward_model.json`` (shape + metadata)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, d / WEIGHTS_FILE)
    (d / CONFIG_FILE).write_text(
        json.dumps({"format": _FORMAT, "model": model.spec(), "metadata": metadata or {}}, indent=2, sort_keys=True)
    )
    return d


def load_reward_model(directory: str | Path) -> RewardModel:
    """Load a model written by :func:`save_reward_model` (``weights_only=True``)."""
    d = Path(directory)
    for f in (CONFIG_FILE, WEIGHTS_FILE):
        if not (d / f).exists():
            raise FileNotFoundError(
                f"{d / f}: missing; a saved reward model folder holds {CONFIG_FILE} and {WEIGHTS_FILE}"
            )
    doc = json.loads((d / CONFIG_FILE).read_text())
    if doc.get("format") != _FORMAT:
        raise ValueError(f"{d / CONFIG_FILE}: reward model format {doc.get('format')!r}, expected {_FORMAT}")
    spec = doc["model"]
    model = RewardModel(spec["n_features"], spec["n_actions"], spec["n_outcome"], tuple(spec["hidden_sizes"]))
    model.load_state_dict(torch.load(d / WEIGHTS_FILE, map_location="cpu", weights_only=True))
    return model.eval()


__all__ = [
    "RewardModelConfig",
    "RewardModel",
    "RewardModelMetrics",
    "PreferencePairs",
    "RewardDataset",
    "bradley_terry_loss",
    "spearman",
    "pairwise_accuracy",
    "score",
    "train_reward_model",
    "save_reward_model",
    "load_reward_model",
]
