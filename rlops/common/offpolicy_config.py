"""Settings of :func:`rlops.model.offpolicy.train`: learning a policy from logged bandit feedback.

Kept apart from the learner (no torch import), as :mod:`rlops.common.ppo_config` is: the params
block ``train.offpolicy`` (:mod:`rlops.common.params_training`) is generated from these fields, so
each default and description lives here only."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

ESTIMATORS = ("snips", "dr")


@dataclass
class OffPolicyConfig:
    """Off-policy learner settings (``train.offpolicy`` in params.yaml)."""

    estimator: str = "snips"
    """``dr`` (self-normalised doubly robust with a reward model fitted on the log) or ``snips``
    (self-normalised importance sampling, no model)."""
    weight_clip: float = 5.0
    """Upper bound on an importance weight ``π/μ`` before self-normalisation."""
    behaviour_coef: float = 0.03
    """Weight of the logged actions' cross-entropy (a KL pull toward the logging policy)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus over legal actions."""
    epochs: int = 10
    """Passes of the policy over the log; the epoch kept is the one whose greedy policy the
    validation part values most."""
    validation_share: float = 0.0
    """Share of the training log set aside to pick the epoch (0: keep the last epoch). With rare
    rewards the greedy policy's validation estimate is noisy enough to pick an epoch by chance."""
    batch_size: int = 8192
    """Decisions per policy minibatch (self-normalisation is per minibatch: keep it large)."""
    learning_rate: float = 3e-3
    """Adam step size of the policy."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the policy network."""
    reward_model_epochs: int = 10
    """Passes of the reward model over the log (``dr`` only)."""
    reward_model_hidden: int = 32
    """Width of the reward model's hidden layer."""
    reward_model_weight_decay: float = 1e-2
    """L2 penalty of the reward model (AdamW), against fitting the noise of rare rewards."""
    seed: int = 0
    """Seeds the networks' initialisation and the minibatch order."""

    def __post_init__(self) -> None:
        self.hidden_sizes = tuple(int(h) for h in self.hidden_sizes)
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"OffPolicyConfig.estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.weight_clip <= 0 or self.epochs < 1 or self.batch_size < 1 or self.learning_rate <= 0:
            raise ValueError("OffPolicyConfig: weight_clip, epochs, batch_size and learning_rate must be positive")
        if not 0.0 <= self.validation_share < 1.0:
            raise ValueError(f"OffPolicyConfig.validation_share must be in [0, 1), got {self.validation_share}")
        if self.behaviour_coef < 0 or self.entropy_coef < 0:
            raise ValueError("OffPolicyConfig: behaviour_coef and entropy_coef must be >= 0")

    def to_params(self) -> dict[str, Any]:
        d = asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d
