"""Running statistics for observation normalisation and reward scaling (SB3 ``VecNormalize``).

* :class:`RunningMeanStd` keeps the mean and variance of a stream of batches (Chan et al.'s
  parallel update). As an ``nn.Module`` its statistics are *buffers*, so the policy that owns one
  saves, loads, checkpoints and exports them with its weights: a served policy normalises exactly
  as it did in training.
* :class:`ReturnScaler` divides each reward by the running standard deviation of the discounted
  return (Engstrom et al., 2020, "Implementation Matters"), so the value targets have about unit
  scale whatever the pack's reward units are.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

EPS = 1e-8


class RunningMeanStd(nn.Module):
    """Mean and variance over every row seen so far, per column (``shape``)."""

    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(self, shape: int | tuple[int, ...] = (), prior_count: float = 1e-4):
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(prior_count))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Fold a batch ``x[B, *shape]`` into the statistics (no host sync)."""
        x = x.reshape(-1, *self.mean.shape).to(self.mean.dtype)
        b_count = float(x.shape[0])
        b_mean, b_var = x.mean(0), x.var(0, unbiased=False)
        total = self.count + b_count
        delta = b_mean - self.mean
        m2 = self.var * self.count + b_var * b_count + delta.pow(2) * self.count * b_count / total
        self.mean.add_(delta * b_count / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: Tensor, clip: float) -> Tensor:
        """``(x − mean) / std`` clipped to ``[−clip, clip]``."""
        return ((x - self.mean) / torch.sqrt(self.var + EPS)).clamp(-clip, clip)


class ReturnScaler:
    """Scales rewards by the running std of the per-env discounted return ``R ← γR + r``."""

    def __init__(self, num_envs: int, gamma: float, device: torch.device, clip: float = 10.0):
        self.gamma, self.clip = gamma, clip
        self.ret = torch.zeros(num_envs, device=device)
        self.rms = RunningMeanStd(()).to(device)

    def __call__(self, reward: Tensor, done: Tensor) -> Tensor:
        self.ret = self.ret * self.gamma + reward
        self.rms.update(self.ret)
        self.ret = torch.where(done, torch.zeros_like(self.ret), self.ret)
        return (reward / torch.sqrt(self.rms.var + EPS)).clamp(-self.clip, self.clip)

    def state_dict(self) -> dict[str, Any]:
        return {"ret": self.ret.clone(), **{k: v.clone() for k, v in self.rms.state_dict().items()}}

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        self.ret = sd["ret"].to(self.ret.device)
        self.rms.load_state_dict({k: sd[k] for k in ("mean", "var", "count")})


__all__ = ["RunningMeanStd", "ReturnScaler"]
