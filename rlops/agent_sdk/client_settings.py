"""The settings of a :class:`~rlops.agent_sdk.policy_client.PolicyClient`, as one checked record.

``PolicyClient(...)`` takes them as keyword arguments and builds a :class:`ClientSettings`; every
value is checked here, once, so a misconfigured client fails at construction with a
:class:`~rlops.common.errors.UserError` that names the argument, not at its first decision.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass

from rlops.agent_sdk.serving_defaults import DEFAULT_EXPLORATION, EXPLORATION_DISTRIBUTIONS
from rlops.common.errors import UserError
from rlops.common.policy_ref import PolicyRef

BAD_STATE_MODES = ("raise_first", "raise", "fallback")
RUNTIMES = ("auto", "torch", "numpy")


def resolve_runtime(runtime: str) -> str:
    """``torch`` or ``numpy`` for a ``runtime`` setting (``auto``: torch when it is installed)."""
    if runtime not in RUNTIMES:
        raise UserError(f"PolicyClient(runtime={runtime!r}): expected one of {', '.join(RUNTIMES)}")
    if runtime == "auto":
        return "torch" if importlib.util.find_spec("torch") is not None else "numpy"
    return runtime


def _positive_seconds(value: object) -> bool:
    return isinstance(value, (int, float)) and 0 < float(value) < float("inf")


@dataclass(frozen=True)
class ClientSettings:
    """How a policy client routes, explores, times out, follows the registry and reports.

    Numbers are normalised on construction (``exploration``, ``refresh_every_s``,
    ``fallback_log_every_s`` to float, ``seed`` to int); ``challenger_fraction`` is kept as given.
    """

    challenger_fraction: float | None = None
    """Share of keys routed to the challenger; None reads the challenger version's
    ``traffic_fraction`` tag (0 when absent)."""
    timeout_ms: float = 50.0
    """A policy decision slower than this falls back to the rule engine."""
    model_name: str | None = None
    """The registered model; None: ``<scenario>-policy``."""
    http_max_retries: int = 2
    """Bound on MLflow server retries while loading (MLflow's own default retries for minutes);
    variables the deployment set itself win."""
    http_timeout_s: int = 10
    """Bound on one MLflow server call while loading; variables the deployment set itself win."""
    refresh_every_s: float | None = 30.0
    """Seconds between registry polls (None: never; call ``refresh()``)."""
    shadow: str | None = None
    """A candidate that decides beside the served policy without being served: an alias
    (``"challenger"``), a version (``"7"``, ``"<scenario>-policy/7"``), or None."""
    exploration: float = DEFAULT_EXPLORATION
    """Share of decisions drawn from the exploration distribution instead of the serving policy's
    choice — the champion's, the challenger's or the rule engine's alike (0: never explore); the
    propensity on each decision accounts for it, so that any candidate can be judged off-policy on
    the logged traffic."""
    exploration_distribution: str = "policy"
    """``policy`` (the serving policy's own distribution over the legal actions: cheap, since a
    good policy rarely puts mass on a costly action; the rule engine has none and explores
    uniformly) or ``uniform`` over the legal actions."""
    no_exploration_segment: str | None = None
    """An expression over the state's fields (e.g. ``"user_profile.age >= 75"``) whose requests
    never explore."""
    bad_state: str = "raise_first"
    """``raise_first`` (raise ``StateError`` until one state has been read, then fall back),
    ``raise`` or ``fallback``."""
    seed: int = 0
    """Seeds the exploration draws."""
    fallback_log_every_s: float = 300.0
    """Seconds (on the client's clock) between the log lines that count the fallbacks of a cause
    after its first WARNING."""
    runtime: str = "auto"
    """``torch`` (the registered pyfunc model), ``numpy`` (its numpy export, no torch needed) or
    ``auto`` (torch when installed); the client's ``runtime`` is the one in use."""

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise UserError(f"PolicyClient(runtime={self.runtime!r}): expected one of {', '.join(RUNTIMES)}")
        if self.refresh_every_s is not None and not _positive_seconds(self.refresh_every_s):
            raise UserError(
                f"PolicyClient(refresh_every_s={self.refresh_every_s!r}): expected seconds > 0, or None "
                "to refresh only when refresh() is called"
            )
        if not isinstance(self.exploration, (int, float)) or not 0.0 <= float(self.exploration) <= 1.0:
            raise UserError(f"PolicyClient(exploration={self.exploration!r}): expected a share in [0, 1]")
        if self.exploration_distribution not in EXPLORATION_DISTRIBUTIONS:
            raise UserError(
                f"PolicyClient(exploration_distribution={self.exploration_distribution!r}): expected one of "
                f"{', '.join(EXPLORATION_DISTRIBUTIONS)}"
            )
        if self.bad_state not in BAD_STATE_MODES:
            raise UserError(f"PolicyClient(bad_state={self.bad_state!r}): expected one of {', '.join(BAD_STATE_MODES)}")
        if not _positive_seconds(self.fallback_log_every_s):
            raise UserError(f"PolicyClient(fallback_log_every_s={self.fallback_log_every_s!r}): expected seconds > 0")
        timeout = self.timeout_ms
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            # NaN or a negative timeout would time every decision out: all traffic on the rule engine
            raise UserError(
                f"PolicyClient(timeout_ms={timeout!r}): expected a finite positive number of milliseconds "
                "(how long a policy may take to decide before the rule engine answers)"
            )
        if self.challenger_fraction is not None and not 0.0 <= float(self.challenger_fraction) <= 1.0:
            raise UserError(
                f"PolicyClient(challenger_fraction={self.challenger_fraction!r}): expected a share in [0, 1]"
            )
        if self.refresh_every_s is not None:
            object.__setattr__(self, "refresh_every_s", float(self.refresh_every_s))
        object.__setattr__(self, "exploration", float(self.exploration))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "fallback_log_every_s", float(self.fallback_log_every_s))

    def shadow_ref(self, scenario: str) -> PolicyRef | None:
        """The shadow candidate of ``scenario`` (None: no shadow); the rule engine cannot be one."""
        if self.shadow is None:
            return None
        ref = PolicyRef.parse(self.shadow, scenario)
        if ref.is_rules:
            raise UserError(
                "PolicyClient(shadow='rules'): the shadow must be a registered policy (an alias or a "
                "version); the rule engine already answers every fallback"
            )
        return ref

    @property
    def timeout_s(self) -> float:
        """``timeout_ms`` in seconds."""
        return float(self.timeout_ms) / 1000.0


__all__ = ["BAD_STATE_MODES", "RUNTIMES", "ClientSettings", "resolve_runtime"]
