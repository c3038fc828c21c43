"""One place to seed every random number generator a run touches."""

from __future__ import annotations

import os
import random

import numpy as np
import torch


def seed_everything(seed: int, deterministic: bool = False) -> torch.Generator:
    """Seed Python's ``random``, NumPy and torch (CPU and every CUDA device) with ``seed``.

    Returns a fresh CPU ``torch.Generator`` seeded with ``seed`` for code that keeps its own
    stream (sampling, minibatch shuffles) so that its draws do not depend on other libraries.
    ``deterministic=True`` additionally asks torch for deterministic kernels (slower on CUDA;
    CPU kernels used by rlops are already deterministic for a fixed thread count).
    """
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    return torch.Generator().manual_seed(seed)


__all__ = ["seed_everything"]
