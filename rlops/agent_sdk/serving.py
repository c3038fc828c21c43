"""What a policy client serves from, and what it answers: one record per concept.

* :class:`LoadedPolicy` — one registered version, loaded;
* :class:`ServingState` — everything a decision needs (champion, challenger and its traffic share,
  shadow), built completely by a refresh and then swapped in as one reference, so a request sees
  the old state or the new one, never half of each;
* :class:`Decision` — the served action with the version that served it, its A/B group, the
  propensity of the action and, when the rule engine answered, why;
* :class:`ShadowDecision` — what the shadow candidate would have done on the same request.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlops.agent_sdk.serving_defaults import DEFAULT_EXPLORATION, EXPLORATION_DISTRIBUTIONS

CHAMPION, CHALLENGER, SHADOW, FALLBACK = "champion", "challenger", "shadow", "fallback"
#: ``Decision.test_group`` values.
TEST_GROUPS = (CHAMPION, CHALLENGER, SHADOW, FALLBACK)
TRAFFIC_TAG = "traffic_fraction"
SEGMENT_TAG = "traffic_segment"
#: The registered-model tag in which rlops records the version it staged as ``challenger``
#: (``rlops.registry.tags.alias_written``; spelled here because agents install this
#: package without the rest of rlops). An alias set in the MLflow UI has no matching record.
CHALLENGER_RECORD_TAG = "rlops.alias.challenger"
RULES_VERSION = "rules"

#: Why a decision fell back to the rule engine: the code in front of ``fallback_reason``
#: (``"<code>: <detail>"``). ``no_champion`` is the expected state before a first promotion.
FALLBACK_CODES = ("bad_state", "no_champion", "load_error", "timeout", "error", "illegal_action")


def hash_fraction(key: str, salt: str = "") -> float:
    """A stable number in [0, 1) for ``key`` (the same on every host and run)."""
    digest = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def fallback_code(reason: str | None) -> str | None:
    """The code of a ``fallback_reason`` (``"timeout: …"`` → ``"timeout"``)."""
    return None if reason is None else str(reason).split(":", 1)[0].strip()


@dataclass
class LoadedPolicy:
    """One registered version, loaded and ready to decide."""

    alias: str
    version: str
    model: Any
    """Has ``predict_obs(obs[N, D]) -> {"action_index", "probs", "logp", "entropy", "value"}``; None
    for a version resolved but not loaded: a challenger with no traffic share never decides, and
    loading a model runs its code."""
    tags: dict[str, str] = field(default_factory=dict)
    ref: str = ""
    """The canonical policy version (``<scenario>-policy/<version>``)."""

    @property
    def loaded(self) -> bool:
        return self.model is not None


@dataclass(frozen=True)
class ServingState:
    """One consistent view of what to serve; never changed after it is built."""

    champion: LoadedPolicy | None = None
    challenger: LoadedPolicy | None = None
    challenger_fraction: float = 0.0
    shadow: LoadedPolicy | None = None
    generation: int = 0
    """How many refreshes built it (0: nothing loaded yet)."""
    loaded_at: float | None = None
    """The client's clock when it was swapped in."""
    load_errors: tuple[tuple[str, str], ...] = ()
    challenger_segment: str | None = None
    """The segment expression the challenger's share applies to (its ``traffic_segment`` tag; None:
    every request). A request whose state is outside it is the champion's."""

    @property
    def policies(self) -> dict[str, LoadedPolicy]:
        """Alias → loaded policy, for the served aliases that exist and are loaded (``champion``,
        ``challenger``)."""
        pairs = ((CHAMPION, self.champion), (CHALLENGER, self.challenger))
        return {a: p for a, p in pairs if p is not None and p.loaded}

    @property
    def versions(self) -> dict[str, str | None]:
        return {
            CHAMPION: self.champion.version if self.champion else None,
            CHALLENGER: self.challenger.version if self.challenger else None,
        }

    def route(self, key: str | None, salt: str, in_segment: bool | None = None) -> str:
        """``challenger`` or ``champion`` for a request key (stable for a key and a traffic share).
        With a :attr:`challenger_segment`, ``in_segment`` says whether the request's state is in it;
        outside it, or not told, the request is the champion's."""
        outside = in_segment is False or (in_segment is None and self.challenger_segment is not None)
        unloaded = self.challenger is None or not self.challenger.loaded
        if key is None or unloaded or self.challenger_fraction <= 0.0 or outside:
            return CHAMPION
        return CHALLENGER if hash_fraction(str(key), salt) < self.challenger_fraction else CHAMPION


@dataclass(frozen=True)
class ServingChange:
    """A served version that changed with a refresh (clock units of the client)."""

    group: str
    """``champion``, ``challenger`` or ``shadow``."""
    old: str | None
    new: str | None
    seen_at: float
    """The client's clock when the new serving state was swapped in."""


@dataclass(frozen=True)
class ShadowDecision:
    """What the shadow candidate chose on a request it did not serve."""

    policy_version: str
    action: str | None = None
    action_index: int | None = None
    probs: dict[str, float] | None = None
    logp: float | None = None
    """Log-probability of the shadow's own action under the shadow policy."""
    served_logp: float | None = None
    """Log-probability the shadow policy gives the action that was served: the numerator of the
    importance weight ``π_shadow(a|s) / propensity`` for off-policy evaluation."""
    agrees: bool | None = None
    error: str | None = None

    @property
    def test_group(self) -> str:
        return SHADOW

    def trace_fields(self) -> dict[str, Any]:
        return {
            "shadow_policy_version": self.policy_version,
            "shadow_action": self.action,
            "shadow_served_logp": self.served_logp,
            "shadow_probs": None if self.probs is None else json.dumps(self.probs, separators=(",", ":")),
        }


@dataclass(frozen=True)
class Decision:
    """The action to execute and what to record about it."""

    action: str
    action_index: int
    mask: list[bool]
    probs: dict[str, float] | None
    """The serving policy's action distribution (None when the rule engine answered)."""
    propensity: float
    """Probability that the client served this action for this state, whoever chose it (the
    policy or the rule engine): ``(1 − ε)·[a is its choice] + ε·explore(a|s)`` with
    ``exploration=ε`` (1.0 for a choice made with no exploration)."""
    entropy: float | None
    value: float | None
    policy_version: str
    """Canonical ``<scenario>-policy/<version>`` of the policy that served it, or ``rules``."""
    test_group: str
    """``champion``, ``challenger`` or ``fallback`` (the rule engine answered)."""
    fallback_reason: str | None = None
    """None, or ``"<code>: <detail>"`` with a code from :data:`FALLBACK_CODES`."""
    routed_group: str = CHAMPION
    """The A/B arm the request's key routed to (also for a fallback)."""
    policy_logp: float | None = None
    """Log-probability of the served action under the serving policy's own distribution."""
    shadow: ShadowDecision | None = None
    latency_ms: float = 0.0
    explored: bool = False
    """The action was drawn from the exploration distribution instead of being the serving
    policy's (or the rule engine's) own choice; the logs' cost of exploration compares these."""

    @property
    def fallback(self) -> bool:
        return self.fallback_reason is not None

    @property
    def reason(self) -> str | None:
        return self.fallback_reason

    @property
    def logp(self) -> float:
        """``log(propensity)``: the trace row's ``logp``."""
        return math.log(self.propensity) if self.propensity > 0 else -math.inf

    def trace_fields(self) -> dict[str, Any]:
        """Step fields for ``Episode.annotate``: the trace row's serving columns (policy version and
        group of this very step, mask, logp = log propensity, entropy, value, fallback and its
        reason, and the shadow's decision when one ran)."""
        out: dict[str, Any] = {
            "policy_version": self.policy_version,
            "test_group": self.test_group,
            "action_mask": self.mask,
            "logp": self.logp,
            "fallback": self.fallback,
            "fallback_reason": self.fallback_reason,
            "explored": self.explored,
        }
        for k in ("entropy", "value"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.shadow is not None:
            out.update(self.shadow.trace_fields())
        return out


def exploration_probs(mask: np.ndarray, probs: np.ndarray | None = None, distribution: str = "uniform") -> np.ndarray:
    """The distribution an explored decision is drawn from, ``[A]`` or ``[N, A]``: uniform over the
    legal actions of ``mask``, or (``policy``) the serving policy's ``probs`` restricted to them and
    renormalised. Without a policy distribution (the rule engine serves), or where it puts no mass
    on a legal action, it is uniform. Never any mass on an illegal action."""
    legal = np.asarray(mask, dtype=np.float64)
    uniform: np.ndarray = legal / np.maximum(legal.sum(axis=-1, keepdims=True), 1.0)
    if distribution != "policy" or probs is None:
        return uniform
    p = np.asarray(probs, dtype=np.float64) * legal
    total = p.sum(axis=-1, keepdims=True)
    out: np.ndarray = np.where(total > 0, p / np.where(total > 0, total, 1.0), uniform)
    return out


def choose(greedy: int, explore: np.ndarray, exploration: float, u: tuple[float, float]) -> tuple[int, float]:
    """``(action, propensity)``: the greedy action, or with probability ``exploration`` (``u[0]``)
    an action drawn from the exploration distribution ``explore`` (``u[1]``; see
    :func:`exploration_probs`); the propensity is the probability of the action under that whole
    rule, ``(1 − ε)·[a = greedy] + ε·explore(a)``."""
    a = greedy
    if exploration > 0.0 and u[0] < exploration:
        cdf = np.cumsum(explore)
        a = int(min(np.searchsorted(cdf, u[1] * cdf[-1], side="right"), len(explore) - 1))
        if explore[a] <= 0.0:  # numerical edge at the end of the cdf
            a = greedy
    p = (1.0 - exploration) * float(a == greedy) + exploration * float(explore[a])
    return a, min(p, 1.0)  # float32 probabilities may sum a hair over 1


def choose_batch(
    greedy: np.ndarray, explore: np.ndarray, exploration: float, u: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`choose` for ``N`` rows at once: ``greedy[N]``, ``explore[N, A]``, ``u[N, 2]`` →
    ``(actions[N], propensities[N])``."""
    a = greedy.astype(np.int64).copy()
    if exploration > 0.0:
        cdf = np.cumsum(explore, axis=1)
        drawn = (cdf <= (u[:, 1] * cdf[:, -1])[:, None]).sum(axis=1).clip(max=explore.shape[1] - 1)
        rows = np.arange(len(a))
        take = (u[:, 0] < exploration) & (explore[rows, drawn] > 0.0)
        a = np.where(take, drawn, a)
    p = (1.0 - exploration) * (a == greedy) + exploration * explore[np.arange(len(a)), a]
    return a, np.minimum(p, 1.0)


__all__ = [
    "CHALLENGER",
    "CHALLENGER_RECORD_TAG",
    "DEFAULT_EXPLORATION",
    "EXPLORATION_DISTRIBUTIONS",
    "CHAMPION",
    "FALLBACK",
    "FALLBACK_CODES",
    "RULES_VERSION",
    "SHADOW",
    "TEST_GROUPS",
    "SEGMENT_TAG",
    "TRAFFIC_TAG",
    "Decision",
    "LoadedPolicy",
    "ServingState",
    "ShadowDecision",
    "choose",
    "choose_batch",
    "exploration_probs",
    "fallback_code",
    "hash_fraction",
]
