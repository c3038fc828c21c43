"""What a policy client counts: its decisions, its fallbacks to the rule engine by cause (with the
log lines that report them, :mod:`rlops.agent_sdk.fallback_log`) and how its shadow fared.

:class:`DecisionCounts` is a base of :class:`~rlops.agent_sdk.policy_client.PolicyClient`, so the
counters read as the client's own (``client.fallbacks``, ``client.fallback_rate``,
``client.shadow_agreement``); they are updated under one lock, since decisions may come from
several threads.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from rlops.agent_sdk.fallback_log import FallbackLog
from rlops.agent_sdk.serving import ShadowDecision

# The client's own logger: an operator filters one name for everything a policy client says.
log = logging.getLogger("rlops.agent_sdk.policy_client")


class DecisionCounts:
    """Counters of a policy client's decisions, fallbacks and shadow decisions.

    Args:
        clock: ``() -> float`` seconds, for the fallback log's period.
        fallback_log_every_s: seconds between the log lines that count a cause's fallbacks.
    """

    def __init__(self, clock: Callable[[], float], fallback_log_every_s: float):
        self.decisions = 0
        self.fallbacks: collections.Counter[str] = collections.Counter()
        self.fallback_log = FallbackLog(clock, log, fallback_log_every_s)
        self.shadow_decisions = self.shadow_agreements = self.shadow_errors = 0
        self._stats_lock = threading.Lock()

    def count_decisions(self, n: int = 1) -> None:
        """Count ``n`` decisions (negative: take back decisions that raised instead)."""
        with self._stats_lock:
            self.decisions += n

    def fell_back(self, kind: str, detail: str) -> None:
        """Count one fallback of cause ``kind`` and report it (``detail``: what happened)."""
        with self._stats_lock:
            self.fallbacks[kind] += 1
        self.fallback_log.fell_back(kind, detail)

    def count_batch(self, n: int, fallbacks: Mapping[str, int], details: Mapping[str, str] | None = None) -> None:
        """Count ``n`` decisions made outside ``decide`` (see :mod:`rlops.agent_sdk.batch`), of
        which ``fallbacks`` fell back per cause (``details``: what each cause's log line says)."""
        with self._stats_lock:
            self.decisions += n
            for kind, k in fallbacks.items():
                if k:
                    self.fallbacks[kind] += int(k)
        for kind, k in fallbacks.items():
            self.fallback_log.fell_back(kind, (details or {}).get(kind, "in a batch of decisions"), int(k))

    def count_shadow(self, decision: ShadowDecision) -> None:
        """Count a shadow decision: an error, or an agreement with the served action or not."""
        with self._stats_lock:
            if decision.error is not None:
                self.shadow_errors += 1
            else:
                self.shadow_decisions += 1
                self.shadow_agreements += int(bool(decision.agrees))

    @property
    def fallback_count(self) -> int:
        """Decisions answered by the rule engine so far (unreadable states included)."""
        return sum(self.fallbacks.values())

    @property
    def fallback_rate(self) -> float:
        """Share of decisions answered by the rule engine (0.0 before any decision)."""
        return self.fallback_count / self.decisions if self.decisions else 0.0

    @property
    def shadow_agreement(self) -> float | None:
        """Share of shadowed decisions where the shadow chose the served action (None: none yet)."""
        return self.shadow_agreements / self.shadow_decisions if self.shadow_decisions else None

    def count_stats(self) -> dict[str, Any]:
        """The counters for a metrics endpoint: decisions, fallbacks by code (in all, and per cause
        still going on since its first log line), rates and shadow agreement."""
        return {
            "decisions": self.decisions,
            "fallbacks": dict(self.fallbacks),
            "fallback_causes": self.fallback_log.active,
            "fallback_rate": self.fallback_rate,
            "shadow_decisions": self.shadow_decisions,
            "shadow_agreement": self.shadow_agreement,
            "shadow_errors": self.shadow_errors,
        }


__all__ = ["DecisionCounts"]
