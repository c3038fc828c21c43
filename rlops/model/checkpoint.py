"""Training checkpoints: everything needed to continue a PPO run exactly where it stopped.

A checkpoint holds the policy and optimizer state, the sampling generator and torch's global RNG,
the environment's ``state_dict()`` (so the same episodes continue), the loop counters and the
stagnation tracker. It is a plain dict of tensors and primitives, written atomically
(``*.tmp`` then rename) and read with ``torch.load(weights_only=True)`` — no pickled code.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FORMAT = 1
_NAME = re.compile(r"^ckpt_(\d{8})\.pt$")


def checkpoint_path(directory: str | Path, iteration: int) -> Path:
    return Path(directory) / f"ckpt_{iteration:08d}.pt"


def save_checkpoint(directory: str | Path, iteration: int, state: Mapping[str, Any], keep: int = 2) -> Path:
    """Write ``state`` as ``ckpt_<iteration>.pt``; keep only the newest ``keep`` checkpoints."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = checkpoint_path(d, iteration)
    tmp = path.with_suffix(".pt.tmp")
    torch.save({"format": CHECKPOINT_FORMAT, **state}, tmp)
    os.replace(tmp, path)  # a kill mid-write never leaves a truncated checkpoint behind
    if keep > 0:
        for old in list_checkpoints(d)[:-keep]:
            old.unlink(missing_ok=True)
    return path


def list_checkpoints(directory: str | Path) -> list[Path]:
    d = Path(directory)
    if not d.is_dir():
        return []
    return sorted((p for p in d.iterdir() if _NAME.match(p.name)), key=lambda p: p.name)


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest ``ckpt_*.pt`` in ``directory`` (None when there is none)."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (tensors and primitives only)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"checkpoint {p} not found")
    state = torch.load(p, map_location=device, weights_only=True)
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{p}: not an rlops training checkpoint (format {CHECKPOINT_FORMAT} expected)")
    return state


__all__ = [
    "CHECKPOINT_FORMAT",
    "checkpoint_path",
    "save_checkpoint",
    "list_checkpoints",
    "latest_checkpoint",
    "load_checkpoint",
]
