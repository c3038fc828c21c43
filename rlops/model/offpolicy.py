"""Policy learning from logged bandit feedback: a softmax policy trained on the logs alone.

Each logged decision ``i`` is a state ``s_i`` (the policy's observation), its legal actions, the
served action ``a_i``, the probability ``μ_i = μ(a_i|s_i)`` with which the logging policy served it
(the propensity on the trace row) and the reward ``r_i``. Episodes are one decision long, so the
logged reward is the whole return and no sandbox is consulted: where the sandbox is wrong, this
learner does not inherit its error. ``train(cfg, data, tracker)`` maximises an off-policy estimate
of the value of the policy ``π_θ`` (Swaminathan & Joachims 2015; Dudík, Langford & Li 2011):

* importance weights ``w_i = min(π_θ(a_i|s_i) / μ_i, weight_clip)``, self-normalised over the log
  (``w_i / w̄``), so a few large ratios cannot carry the objective;
* ``snips``: ``J(θ) = Σ_i w_i r_i / Σ_i w_i``;
* ``dr`` (self-normalised doubly robust): a reward model ``q̂(s, a)`` fitted on the same log first,
  then ``J(θ) = mean_i [ Σ_a π_θ(a|s_i) q̂(s_i, a) + (w_i / w̄) (r_i − q̂(s_i, a_i)) ]``: the model
  gives every legal action a gradient, the weighted residual corrects it where it is wrong;
* variance control besides the clip (the value term divided by the logged rewards' standard
  deviation, so the coefficients are scale-free): ``behaviour_coef`` × the cross-entropy of the logged actions
  (``−mean_i log π_θ(a_i|s_i)``, the KL from the logging policy to ``π_θ`` up to a constant: it
  holds ``π_θ`` where the log has support) and ``entropy_coef`` × the entropy over legal actions;
* a ``validation_share`` of the log, not trained on, keeps the epoch whose greedy policy (the one
  served) it values most.

Illegal actions get probability exactly 0: the policy is :class:`~rlops.model.policy.PolicyNetwork`,
whose masked softmax is the one PPO trains and the policy client serves, so the result saves,
registers and serves as a PPO policy does. Deterministic for a seed on CPU.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from rlops.common.metrics_sink import MetricsSink, NullSink
from rlops.common.offpolicy_config import ESTIMATORS, OffPolicyConfig
from rlops.model.masked_distributions import EXP_FLOOR, masked_entropy
from rlops.model.policy import PolicyConfig, PolicyNetwork

__all__ = [
    "ESTIMATORS",
    "LoggedDecisions",
    "OffPolicyConfig",
    "OffPolicyResult",
    "RewardModel",
    "WeightStats",
    "train",
]


@dataclass(frozen=True)
class LoggedDecisions:
    """One-step logged traffic as tensors (``N`` decisions, observation width ``D``, ``A`` actions)."""

    obs: Tensor
    """``[N, D]`` float: the observation the logging policy decided on (features, mask, history)."""
    mask: Tensor
    """``[N, A]`` bool: the legal actions."""
    action: Tensor
    """``[N]`` long: the action served."""
    propensity: Tensor
    """``[N]`` float in (0, 1]: its probability under the logging policy, ``μ(a_i|s_i)``."""
    reward: Tensor
    """``[N]`` float: the decision's reward (its episode's return)."""
    n_features: int
    """How many of the observation's leading columns are state features (``ObsLayout.n_features``);
    the mask and the action history follow them."""

    def __post_init__(self) -> None:
        n = self.obs.shape[0]
        if not (self.mask.shape[0] == self.action.shape[0] == self.propensity.shape[0] == self.reward.shape[0] == n):
            raise ValueError("LoggedDecisions: obs, mask, action, propensity and reward need one row per decision")
        if n == 0:
            raise ValueError("LoggedDecisions: no logged decisions")
        if not bool(self.mask.gather(1, self.action.unsqueeze(1)).all()):
            raise ValueError("LoggedDecisions: a logged action is illegal under its own mask")
        p = self.propensity
        if not bool(((p > 0) & (p <= 1 + 1e-6)).all()):
            raise ValueError("LoggedDecisions: every propensity must be in (0, 1]")

    @property
    def n(self) -> int:
        return int(self.obs.shape[0])

    @property
    def n_actions(self) -> int:
        return int(self.mask.shape[1])

    def take(self, index: Tensor) -> LoggedDecisions:
        """The decisions at ``index`` (a minibatch or a split)."""
        return LoggedDecisions(
            self.obs[index],
            self.mask[index],
            self.action[index],
            self.propensity[index],
            self.reward[index],
            self.n_features,
        )

    def policy_config(self, hidden_sizes: tuple[int, ...]) -> PolicyConfig:
        """The shape of a policy over these observations (features standardised in the network)."""
        history_len = self.obs.shape[1] - self.n_features - self.n_actions
        return PolicyConfig(self.n_features, self.n_actions, history_len, hidden_sizes=hidden_sizes, obs_norm=True)


@dataclass(frozen=True)
class WeightStats:
    """The importance weights of a policy on the log, as the estimate used them."""

    ess: float
    """Effective sample size ``(Σ w)² / Σ w²`` of the clipped weights."""
    clipped_share: float
    """Share of decisions whose ratio ``π/μ`` exceeded ``weight_clip``."""
    max_ratio: float
    """Largest unclipped ratio."""


@dataclass(frozen=True)
class OffPolicyResult:
    """What :func:`train` returns."""

    policy: PolicyNetwork
    """The learnt policy (CPU, eval mode), in PPO's artifact format."""
    reward_model: RewardModel | None
    """``q̂(s, a)`` (``dr`` only)."""
    estimate: float
    """The objective's estimate of the learnt (softmax) policy's value on the fit part of the log."""
    validation_estimate: float
    """The estimate of its greedy (served) policy on the validation part (NaN without one)."""
    best_epoch: int
    """The epoch kept: the best greedy validation estimate (the last one without validation)."""
    logged_value: float
    """Mean logged reward: the logging policy's value on the same log."""
    weights: WeightStats
    """The learnt policy's weights on the log."""
    history: list[dict[str, float]]
    """Per-epoch metrics."""
    train_seconds: float


# --------------------------------------------------------------------------- reward model
class RewardModel(nn.Module):
    """``q̂(s, ·)``: one hidden layer over the state inputs (features and mask), a head per action."""

    def __init__(self, n_inputs: int, n_actions: int, hidden: int):
        super().__init__()
        self.hidden = nn.Linear(n_inputs, hidden)
        self.head = nn.Linear(hidden, n_actions)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.head(torch.tanh(self.hidden(x)))
        return out


def fit_reward_model(
    cfg: OffPolicyConfig, inputs: Tensor, data: LoggedDecisions, generator: torch.Generator
) -> RewardModel:
    """Least squares of the logged reward on ``q̂(s_i, a_i)``. The output layer starts at the mean
    reward, so an action the log never served predicts the mean, not noise."""
    model = RewardModel(inputs.shape[1], data.n_actions, cfg.reward_model_hidden)
    with torch.no_grad():
        model.head.weight.mul_(0.01)
        model.head.bias.fill_(float(data.reward.mean()))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.reward_model_weight_decay)
    for _ in range(cfg.reward_model_epochs):
        for idx in torch.randperm(data.n, generator=generator).split(cfg.batch_size):
            pred = model(inputs[idx]).gather(1, data.action[idx].unsqueeze(1)).squeeze(1)
            loss = ((pred - data.reward[idx]) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


# --------------------------------------------------------------------------- the objective
def legal_probs(logp: Tensor, mask: Tensor) -> Tensor:
    """``π(a|s)`` from masked log-probabilities, exactly 0 on illegal actions; differentiable
    (:func:`~rlops.model.masked_distributions.probs_of` works in place, for serving)."""
    return torch.where(mask, logp.clamp_min(EXP_FLOOR).exp(), torch.zeros_like(logp))


def policy_value(pi: Tensor, batch: LoggedDecisions, q: Tensor | None, clip: float) -> tuple[Tensor, Tensor, Tensor]:
    """The self-normalised IS (``q`` None) or DR estimate of the policy with probabilities
    ``pi[N, A]`` (0 on illegal actions) on ``batch``; also the clipped weights and the raw ratios."""
    taken = pi.gather(1, batch.action.unsqueeze(1)).squeeze(1)
    ratio = taken / batch.propensity
    w = ratio.clamp(max=clip)
    w_sn = w / w.mean().clamp_min(1e-12)  # a policy that never takes a logged action has no IS term
    if q is None:
        return (w_sn * batch.reward).mean(), w, ratio
    direct = (pi * torch.where(batch.mask, q, torch.zeros_like(q))).sum(1)
    residual = batch.reward - q.gather(1, batch.action.unsqueeze(1)).squeeze(1)
    return (direct + w_sn * residual).mean(), w, ratio


def greedy_probs(logp: Tensor) -> Tensor:
    """The served policy: probability 1 on the most probable legal action."""
    return torch.zeros_like(logp).scatter_(1, logp.argmax(1, keepdim=True), 1.0)


def weight_stats(w: Tensor, ratio: Tensor, clip: float) -> WeightStats:
    return WeightStats(
        ess=float(w.sum() ** 2 / (w**2).sum()),
        clipped_share=float((ratio > clip).float().mean()),
        max_ratio=float(ratio.max()),
    )


# --------------------------------------------------------------------------- the loop
def train(cfg: OffPolicyConfig, data: LoggedDecisions, tracker: MetricsSink | None = None) -> OffPolicyResult:
    """Learn a policy from ``data``; ``tracker`` receives the run's params and one row of metrics
    per epoch."""
    tracker = tracker or NullSink()
    tracker.log_params({f"offpolicy.{k}": v for k, v in cfg.to_params().items()} | {"decisions": data.n})
    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    data = LoggedDecisions(
        data.obs.float(),
        data.mask.bool(),
        data.action.long(),
        data.propensity.float(),
        data.reward.float(),
        data.n_features,
    )
    # ALGO LOGIC: a validation share of the log picks the epoch; the rest fits the model and policy.
    order = torch.randperm(data.n, generator=generator)
    n_val = int(round(cfg.validation_share * data.n)) if data.n > 1 else 0
    fit, val = data.take(order[n_val:]), (data.take(order[:n_val]) if n_val else None)

    # ALGO LOGIC: the policy normalises its features with the log's statistics, as PPO's does with
    # its rollouts', so the saved network standardises at serving time exactly as in training.
    policy = PolicyNetwork(data.policy_config(cfg.hidden_sizes))
    policy.update_obs_stats(fit.obs)
    with torch.no_grad():
        inputs = policy.state_inputs(fit.obs)
        val_inputs = policy.state_inputs(val.obs) if val is not None else None

    # ALGO LOGIC: the direct method q̂(s, a), fitted once on the fit part (dr only).
    reward_model = fit_reward_model(cfg, inputs, fit, generator) if cfg.estimator == "dr" else None
    q_fit = q_val = None
    if reward_model is not None:
        with torch.no_grad():
            q_fit = reward_model(inputs)
            q_val = reward_model(val_inputs) if val_inputs is not None else None

    # The value term in units of the log's reward spread: the pulls below then weigh the same
    # against a click rate of 0.005 as against a return near 1.
    reward_scale = float(fit.reward.std()) if fit.n > 1 else 1.0
    reward_scale = reward_scale if reward_scale > 0 else 1.0

    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)
    history: list[dict[str, float]] = []
    best: tuple[float, int, dict[str, Tensor]] | None = None
    for epoch in range(1, cfg.epochs + 1):
        for idx in torch.randperm(fit.n, generator=generator).split(cfg.batch_size):
            batch = fit.take(idx)
            logp, _ = policy(batch.obs, batch.mask)
            pi = legal_probs(logp, batch.mask)
            value, _, _ = policy_value(pi, batch, None if q_fit is None else q_fit[idx], cfg.weight_clip)
            # the logged actions' cross-entropy: KL(μ‖π) up to a constant, estimated on μ's own samples
            behaviour = -logp.gather(1, batch.action.unsqueeze(1)).mean()
            entropy = masked_entropy(logp, batch.mask, pi).mean()
            loss = -value / reward_scale + cfg.behaviour_coef * behaviour - cfg.entropy_coef * entropy
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

        # ALGO LOGIC: the epoch's estimates: the softmax policy on the fit part (what was maximised),
        # the served greedy policy on the validation part, its weights clipped as in training: a
        # greedy weight is 1/μ, and unclipped the rare rewards of a few rarely served actions would
        # pick the epoch.
        with torch.no_grad():
            logp, _ = policy(fit.obs, fit.mask)
            value, w, ratio = policy_value(legal_probs(logp, fit.mask), fit, q_fit, cfg.weight_clip)
            stats = weight_stats(w, ratio, cfg.weight_clip)
            row = {
                "epoch": float(epoch),
                "estimate": float(value),
                "ess": stats.ess,
                "clipped_share": stats.clipped_share,
                "entropy": float(masked_entropy(logp, fit.mask).mean()),
            }
            if val is not None:
                val_logp, _ = policy(val.obs, val.mask)
                greedy = greedy_probs(val_logp)
                row["validation_greedy"] = float(policy_value(greedy, val, q_val, cfg.weight_clip)[0])
        history.append(row)
        tracker.log_metrics({k: v for k, v in row.items() if k != "epoch"}, step=epoch)
        score = row.get("validation_greedy", float(epoch))  # without validation: the last epoch
        if best is None or score >= best[0]:  # a tie keeps the later, further trained epoch
            best = (score, epoch, {k: v.clone() for k, v in policy.state_dict().items()})

    assert best is not None  # epochs >= 1
    policy.load_state_dict(best[2])
    chosen = history[best[1] - 1]
    return OffPolicyResult(
        policy=policy.eval(),
        reward_model=reward_model,
        estimate=chosen["estimate"],
        validation_estimate=chosen.get("validation_greedy", math.nan),
        best_epoch=best[1],
        logged_value=float(data.reward.mean()),
        weights=WeightStats(chosen["ess"], chosen["clipped_share"], stats.max_ratio),
        history=history,
        train_seconds=time.perf_counter() - t0,
    )
