"""The torch device a run's ``device`` setting (:attr:`rlops.common.ppo_config.PPOConfig.device`) names."""

from __future__ import annotations

import torch


def resolve_device(name: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU; an explicit ``cuda`` without CUDA is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("PPOConfig.device is 'cuda' but no CUDA device is available; use 'auto' or 'cpu'")
    return dev


__all__ = ["resolve_device"]
