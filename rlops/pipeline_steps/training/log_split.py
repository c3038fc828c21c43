"""The held-out split of logged episodes: which episodes a log-trained candidate never saw.

An episode is held out when a hash of ``(seed, episode id)`` falls under ``share``: a pure function
of the id, so the training that split the log and the off-policy gate that judges the candidate
later agree on the split from two numbers recorded on the candidate's version (tags
``logs_split_seed`` and ``logs_holdout_share``), without storing a list of ids, and the same
episode is held out in every window that contains it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SEED_TAG = "logs_split_seed"
SHARE_TAG = "logs_holdout_share"


@dataclass(frozen=True)
class HoldOut:
    """A split of logged episodes into training and held-out ones."""

    seed: int
    """Salt of the hash: another seed holds out other episodes."""
    share: float
    """Expected share of episodes held out, in [0, 1)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.share < 1.0:
            raise ValueError(f"held-out share {self.share!r}: expected a number in [0, 1)")

    def held_out(self, episode_ids: Iterable[object]) -> list[bool]:
        """Per episode id, whether it is held out."""
        return [self.position(str(e)) < self.share for e in episode_ids]

    def position(self, episode_id: str) -> float:
        """Where the episode falls in [0, 1): the first 8 bytes of ``sha256(seed:id)``."""
        digest = hashlib.sha256(f"{self.seed}:{episode_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2.0**64

    def tags(self) -> dict[str, str]:
        """The model-version tags that let the off-policy gate rebuild the split."""
        return {SEED_TAG: str(self.seed), SHARE_TAG: f"{self.share:g}"}

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> HoldOut | None:
        """The split recorded on a candidate's version (None: it was not trained on logs)."""
        if SEED_TAG not in tags or SHARE_TAG not in tags:
            return None
        return cls(int(tags[SEED_TAG]), float(tags[SHARE_TAG]))


__all__ = ["SEED_TAG", "SHARE_TAG", "HoldOut"]
