"""Counter-based randomness: every draw is a hash of (instance seed, episode, state hash, draw id).

No generator state is carried between steps, so the same state sequence replays the same random
events anywhere: in a batch of 4096 or alone, on CPU or GPU, after a checkpoint restore.
Arithmetic is done on int64 tensors holding 32-bit values; products are masked back to 32 bits.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor
M32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B1


def mix32(x: Tensor) -> Tensor:
    """A 32-bit avalanche hash (lowbias32) on int64 tensors with values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & M32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & M32
    return x ^ (x >> 16)


def combine(a: Tensor, b: Tensor | int) -> Tensor:
    """Hash two 32-bit keys into one."""
    return mix32((a * _GOLDEN + b) & M32)


def to_unit(h: Tensor) -> Tensor:
    """Map a 32-bit hash to a float32 uniform in [0, 1) with 24 bits of resolution."""
    return (h >> 8).to(torch.float32) * (1.0 / 16777216.0)


def seed_key(seeds: Tensor, episodes: Tensor) -> Tensor:
    """Key of one episode of one instance: a hash of its seed (any int64) and episode counter."""
    lo = seeds & M32
    hi = (seeds >> 32) & M32
    # One avalanche over an odd-weighted combination (mod 2**32) of the three 32-bit parts.
    return mix32((lo * 0x9E3779B1 + hi * 0x85EBCA77 + (episodes & M32) * 0xC2B2AE3D) & M32)


def state_hash(S: Tensor, col_weights: Tensor) -> Tensor:
    """A hash of each row of the float32 state tensor: its bit patterns, weighted, summed, mixed."""
    # Products and the row sum wrap around in int32: arithmetic modulo 2**32 is exact and
    # order-free, so a row hashes the same in any batch size, on any device.
    bits = S.contiguous().view(torch.int32)
    return mix32((bits * col_weights).sum(dim=1, dtype=torch.int32).to(torch.int64) & M32)


def column_weights(n_cols: int, device: torch.device | str = "cpu") -> Tensor:
    """Odd int32 weights (below 2**24), one per state column, for :func:`state_hash`."""
    idx = torch.arange(n_cols, dtype=torch.int64, device=device)
    return ((mix32(idx + 12345) & 0xFFFFFF) | 1).to(torch.int32)


class StepRandom:
    """The random source of one step: ``uniform(draw_id)`` gives one uniform per row.

    The first ``n_draws`` uniforms of every row are hashed in one batched op (a [N, n_draws]
    block) rather than one op chain per draw; later ids are hashed on demand.
    """

    def __init__(self, key: Tensor, n_draws: int = 0):
        self.key = key
        self.n_draws = n_draws
        self._block: Tensor | None = None

    def block(self) -> Tensor:
        """The ``[N, n_draws]`` block of uniforms for draw ids ``0 .. n_draws - 1``."""
        if self._block is None:
            ids = torch.arange(1, self.n_draws + 1, dtype=torch.int64, device=self.key.device)
            self._block = to_unit(mix32((self.key.unsqueeze(1) * _GOLDEN + ids) & M32))
        return self._block

    def uniform(self, draw_id: int) -> Tensor:
        if draw_id < self.n_draws:
            return self.block()[:, draw_id]
        return to_unit(mix32((self.key * _GOLDEN + draw_id + 1) & M32))
