"""Shape and training settings of the reward model (:mod:`rlops.model.reward_model`).

Kept apart from the model (no torch import) so the params schema (:mod:`rlops.common.params_training`,
which generates the ``reward_model:`` block from these fields) reads it in the base layer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass
class RewardModelConfig:
    """Reward-model shape and training settings."""

    hidden_sizes: tuple[int, ...] = (128, 128)
    """Hidden layer widths of the scoring MLP."""
    loss: str = "pairwise"
    """``pairwise`` (Bradley–Terry on preference pairs) or ``regression`` (MSE on reward totals)."""
    margin: float = 0.0
    """Margin in the Bradley–Terry loss: the chosen score must beat the rejected one by this much."""
    center_coef: float = 0.01
    """Weight of ``(r_chosen + r_rejected)²``, which keeps the scores' offset near 0."""
    learning_rate: float = 3e-3
    """Adam step size (cosine-decayed to 0 over training)."""
    weight_decay: float = 1e-5
    """AdamW weight decay."""
    epochs: int = 100
    """Passes over the training split."""
    batch_size: int = 256
    """Pairs (or rows) per gradient step."""
    holdout_fraction: float = 0.2
    """Share of the data kept out of training for the reported metrics."""
    seed: int = 0
    """Seeds the weight init, the split and the shuffles."""

    def __post_init__(self) -> None:
        self.hidden_sizes = tuple(int(h) for h in self.hidden_sizes)
        if self.loss not in ("pairwise", "regression"):
            raise ValueError(f"RewardModelConfig.loss must be 'pairwise' or 'regression', got '{self.loss}'")
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError(f"RewardModelConfig.holdout_fraction must be in [0, 1), got {self.holdout_fraction}")

    @classmethod
    def from_params(cls, params: dict[str, Any] | None = None, **overrides: Any) -> RewardModelConfig:
        """Build from a mapping of these fields (the resolved ``reward_model:`` block) plus keyword overrides."""
        merged = {**(params or {}), **overrides}
        unknown = sorted(set(merged) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(
                f"unknown reward_model settings {unknown}; expected a subset of {sorted(f.name for f in fields(cls))}"
            )
        return cls(**merged)


__all__ = ["RewardModelConfig"]
