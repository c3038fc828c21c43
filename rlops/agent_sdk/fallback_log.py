"""What the policy client logs about rule-engine fallbacks: one WARNING per cause, then counts.

An agent serving before its first promotion decides thousands of times an hour on the rule engine;
a warning per decision buries every other line of its log (and costs as much as the decision).
So each cause — the fallback code: ``no_champion``, ``load_error``, ``timeout``, ``error``,
``illegal_action``, ``bad_state`` — is logged the first time with its detail, then counted:

* while it goes on, one WARNING per ``report_every_s`` (on the client's clock) says how many
  decisions fell back for it since the last line, with the latest detail;
* when a policy serves again after a cause that holds for every decision until the serving state
  changes (``no_champion``, ``load_error``), an INFO line says how many fell back for it in all,
  and the cause is closed: its next occurrence is a new first WARNING;
* :meth:`FallbackLog.close` logs what is still uncounted in a line.

Nothing is dropped: the counts are in :attr:`FallbackLog.pending` (since the last line) and the
client's ``fallbacks`` counter (all of them), and every fallback decision still carries its
``fallback_reason`` on its trace row.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

#: Causes that hold for every decision until the serving state changes: a decision served by a
#: policy ends them. The others (a slow or failing call, an illegal action, an unreadable state)
#: come and go request by request, so a served decision says nothing about them.
STATE_CAUSES = frozenset({"no_champion", "load_error"})


@dataclass
class _Spell:
    """One cause from its first WARNING on."""

    since: float  # the clock at its first fallback
    reported_at: float  # the clock at its last line
    detail: str  # the latest detail
    pending: int = 0  # fallbacks not yet in a line
    total: int = 0  # fallbacks since ``since``


class FallbackLog:
    """One WARNING per fallback cause, then a count per ``report_every_s`` and on recovery."""

    def __init__(
        self, clock: Callable[[], float], logger: logging.Logger, report_every_s: float = 300.0, name: str = ""
    ) -> None:
        self.clock, self.log, self.report_every_s = clock, logger, float(report_every_s)
        self.name = name or "policy client"
        self._spells: dict[str, _Spell] = {}
        self._lock = threading.Lock()

    @property
    def pending(self) -> dict[str, int]:
        """Fallbacks per cause since that cause's last log line (what no line has counted yet)."""
        with self._lock:
            return {kind: s.pending for kind, s in self._spells.items() if s.pending}

    @property
    def active(self) -> dict[str, int]:
        """Fallbacks per cause since its first WARNING, for the causes not closed by a recovery."""
        with self._lock:
            return {kind: s.total for kind, s in self._spells.items()}

    def fell_back(self, kind: str, detail: str, n: int = 1) -> None:
        """``n`` decisions fell back for ``kind``: the first WARNING, a periodic count, or nothing."""
        if n <= 0:
            return
        now = self.clock()
        with self._lock:
            spell = self._spells.get(kind)
            if spell is None:
                self._spells[kind] = _Spell(since=now, reported_at=now, detail=detail, pending=0, total=n)
                first, count, span = True, n, 0.0
            else:
                spell.pending += n
                spell.total += n
                spell.detail = detail
                if now - spell.reported_at < self.report_every_s:
                    return
                first, count, span = False, spell.pending, now - spell.reported_at
                spell.pending, spell.reported_at = 0, now
        if first:
            self.log.warning(
                "%s: rule-engine fallback (%s): %s — %s; further fallbacks for this cause are counted "
                "and logged every %.0f s and when a policy serves again",
                self.name,
                kind,
                detail,
                f"{n} decisions" if n > 1 else "1 decision",
                self.report_every_s,
            )
        else:
            self.log.warning(
                "%s: %d more decision(s) fell back to the rule engine (%s) in the last %.0f s; latest: %s",
                self.name,
                count,
                kind,
                span,
                detail,
            )

    def served(self, by: str) -> None:
        """A policy (``by``) served a decision: close the causes it ends, with their counts."""
        if STATE_CAUSES.isdisjoint(self._spells):  # the hot path: nothing to close
            return
        now = self.clock()
        with self._lock:
            ended = [(k, self._spells.pop(k)) for k in list(self._spells) if k in STATE_CAUSES]
        for kind, spell in ended:
            self.log.info(
                "%s: %s serves again; %d decision(s) fell back to the rule engine (%s) over %.0f s, "
                "%d since the last line about it",
                self.name,
                by,
                spell.total,
                kind,
                now - spell.since,
                spell.pending,
            )

    def close(self) -> None:
        """Log what no line has counted yet (the client is closing)."""
        with self._lock:
            left = [(kind, spell.pending, spell.total) for kind, spell in self._spells.items() if spell.pending]
            for spell in self._spells.values():
                spell.pending = 0
        for kind, pending, total in left:
            self.log.info(
                "%s: closing; %d decision(s) fell back to the rule engine (%s) since its last line, %d in all",
                self.name,
                pending,
                kind,
                total,
            )
