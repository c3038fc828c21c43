"""Following the registry: the serving state a policy client decides from, kept current.

A :class:`RegistryFollower` reads the ``champion``/``challenger`` aliases (and the shadow) from a
:class:`~rlops.agent_sdk.registry_source.RegistrySource`, builds the complete new
:class:`~rlops.agent_sdk.serving.ServingState` and swaps it in as one reference, so a request is
decided wholly by the old state or wholly by the new one. It polls every ``refresh_every_s`` seconds:
from a background thread with the real clock, or on :meth:`RegistryFollower.poll` once the period has
passed on another (simulated) clock. It records each change of a served version
(:class:`~rlops.agent_sdk.serving.ServingChange`) and when a version served its first decision, so
a promotion's time to reach the agent can be measured.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rlops.agent_sdk.registry_source import RegistrySource, build_serving_state
from rlops.agent_sdk.serving import CHALLENGER, CHAMPION, SHADOW, LoadedPolicy, ServingChange, ServingState
from rlops.common.policy_ref import PolicyRef, canonical_policy

# The client's own logger: an operator filters one name for everything a policy client says.
log = logging.getLogger("rlops.agent_sdk.policy_client")


class RegistryFollower:
    """The serving state in force for one scenario, refreshed from ``source`` (a
    :class:`~rlops.agent_sdk.policy_client.PolicyClient` is one: it decides from this state).

    Args:
        source: where the aliases, tags and models are read.
        scenario: scenario name (canonical versions are ``<scenario>-policy/<n>``).
        shadow_ref: the shadow candidate to load beside the served policies, or None.
        challenger_fraction: share of keys routed to the challenger; None reads its tag.
        refresh_every_s: seconds between polls (None: only on :meth:`refresh`).
        clock: ``() -> float`` seconds; the poll period and the change times are on it.
    """

    def __init__(
        self,
        source: RegistrySource,
        scenario: str,
        shadow_ref: PolicyRef | None,
        challenger_fraction: float | None,
        refresh_every_s: float | None,
        clock: Callable[[], float],
    ):
        self.source, self.scenario, self.shadow_ref = source, scenario, shadow_ref
        self.challenger_fraction_override = challenger_fraction
        self.refresh_every_s = refresh_every_s
        self.clock = clock
        self._serving = ServingState()
        self.changes: list[ServingChange] = []
        self.last_refresh_error: str | None = None
        self._served_since: dict[tuple[str, str], float] = {}  # (group, version) → first decision since it entered
        self._refresh_lock = threading.Lock()
        self._next_refresh = float("inf")
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None  # the background poller (None: polls happen on poll())

    def start(self, load: bool, background: bool) -> None:
        """Load now (``load``; a failure raises) or at the first poll, then start the background
        poller when ``background`` and a period is set."""
        if load:
            self.refresh()
        elif self.refresh_every_s is not None:
            self._next_refresh = self.clock()  # the first decision loads
        if self.refresh_every_s is not None and background:
            name = f"rlops-policy-follow-{self.scenario}"
            self._thread = threading.Thread(target=self._follow, name=name, daemon=True)
            self._thread.start()

    @property
    def serving(self) -> ServingState:
        """The serving state in force (one consistent snapshot)."""
        return self._serving

    @property
    def policies(self) -> dict[str, LoadedPolicy]:
        return self._serving.policies

    @property
    def load_errors(self) -> dict[str, str]:
        return dict(self._serving.load_errors)

    @property
    def challenger_fraction(self) -> float:
        return self._serving.challenger_fraction

    def current(self) -> ServingState:
        """The state a decision reads once: the one in force when a background thread polls, else
        :meth:`poll`'s."""
        return self._serving if self._thread is not None else self.poll()

    def refresh(self) -> dict[str, str | None]:
        """Read the aliases now, load what changed and swap the new serving state in; returns
        alias → version (``shadow`` too when one is configured). A policy that fails to load keeps
        the one loaded before (if any) and the failure is in :attr:`load_errors`."""
        with self._refresh_lock:
            new = self._refresh_locked()
        out = new.versions
        if self.shadow_ref is not None:
            out[SHADOW] = new.shadow.version if new.shadow else None
        return out

    def _refresh_locked(self) -> ServingState:
        """Build the complete new state, then swap it in (the caller holds the refresh lock)."""
        old = self._serving
        new = build_serving_state(
            self.source, self.scenario, old, self.shadow_ref, self.challenger_fraction_override, self.clock()
        )
        self._serving = new  # the swap: one reference, read once per decision
        self._next_refresh = (new.loaded_at or 0.0) + self.refresh_every_s if self.refresh_every_s else float("inf")
        self._note_changes(old, new)
        return new

    def poll(self) -> ServingState:
        """Refresh when a period has passed on the clock; the serving state in force. While another
        thread refreshes, it does not wait: requests keep the state in force."""
        if self.clock() >= self._next_refresh and self._refresh_lock.acquire(blocking=False):
            try:
                if self.clock() >= self._next_refresh:  # not done meanwhile by another thread
                    self._safe_refresh(locked=True)
            finally:
                self._refresh_lock.release()
        return self._serving

    def notify(self) -> None:
        """Ask for a refresh as soon as possible (a registry webhook or an operator's signal):
        the background poller wakes now; with a custom clock, the next decision refreshes."""
        self._next_refresh = float("-inf")
        self._wake.set()

    def _safe_refresh(self, locked: bool = False) -> None:
        try:
            if locked:
                self._refresh_locked()
            else:
                self.refresh()
            self.last_refresh_error = None
        except Exception as exc:  # noqa: BLE001 - a failing poll keeps serving what is loaded
            self.last_refresh_error = f"{type(exc).__name__}: {exc}"
            self._next_refresh = self.clock() + (self.refresh_every_s or 0.0)
            log.warning("policy client: registry poll failed, still serving %s: %s", self._serving.versions, exc)

    def _follow(self) -> None:
        if self._serving.generation == 0:  # not loaded at construction: load now, not a period later
            self._safe_refresh()
        while not self._closed:
            self._wake.wait(self.refresh_every_s)
            self._wake.clear()
            if self._closed:
                return
            self._safe_refresh()

    def _note_changes(self, old: ServingState, new: ServingState) -> None:
        for group in (CHAMPION, CHALLENGER, SHADOW):
            a, b = getattr(old, group), getattr(new, group)
            va, vb = (a.ref if a else None), (b.ref if b else None)
            if va != vb:
                if vb is not None:  # it (re)enters the group: its first decision there is still to come
                    self._served_since.pop((group, vb), None)
                self.changes.append(ServingChange(group, va, vb, float(new.loaded_at or 0.0)))
                log.info("policy client: %s now serves %s (was %s)", group, vb or "nothing", va or "nothing")

    def mark_served(self, policy: LoadedPolicy, alias: str = CHAMPION) -> None:
        """Record that ``policy`` served a decision as ``alias`` now (the first one counts)."""
        key = (alias, policy.ref)
        if key not in self._served_since:
            self._served_since.setdefault(key, self.clock())

    def first_served_at(self, version: str | int, alias: str = CHAMPION) -> float | None:
        """The clock at the first decision ``version`` served as ``alias`` (``champion`` or
        ``challenger``) since it last became that alias; None while it has served none."""
        return self._served_since.get((alias, canonical_policy(version, self.scenario)))

    def promotion_to_agent_s(self, version: str | int, moved_at: float, alias: str = CHAMPION) -> float | None:
        """Seconds on the clock from ``moved_at`` (when ``alias`` moved to ``version`` in the registry)
        to the first decision that version served as ``alias``; None while it has served none."""
        first = self.first_served_at(version, alias)
        return None if first is None else first - float(moved_at)

    def close(self) -> None:
        """Stop the background poller (it wakes and returns)."""
        self._closed = True
        self._wake.set()


__all__ = ["RegistryFollower"]
