"""Serve the ``champion`` policy (and a ``challenger`` split) to a production agent, follow the
registry while running, and fall back to the scenario's rule engine — never silently.

::

    from rlops.agent_sdk.policy_client import PolicyClient

    client = PolicyClient("http://mlflow:5000", "credit_approval", "scenarios/credit_approval",
                          timeout_ms=50, refresh_every_s=30, shadow="challenger")
    decision = client.decide(state, key=applicant_id, history=actions_so_far)
    current_episode().annotate(**decision.trace_fields())  # version, group, mask, logp, fallback, shadow
    executor.execute(decision.action, state)

* **Following the registry.** The policies are the registered versions behind the aliases
  ``champion`` and ``challenger`` of ``<scenario>-policy`` (MLflow pyfunc models). Every
  ``refresh_every_s`` seconds (default 30; ``None``: only when :meth:`refresh` is called) the client
  reads the aliases and the challenger's ``traffic_fraction`` tag again, loads what changed, builds
  the complete new :class:`ServingState` and swaps it in as one reference: a request is decided
  wholly by the old state or wholly by the new one. A promotion, a staged traffic share, a rollback
  (``champion`` moved back) or a challenger withdrawn thus reaches a running agent within one period.
  With the default clock a background thread polls; with another ``clock`` (a simulated one) the
  poll happens on :meth:`decide` or :meth:`poll` once the period has passed on that clock.
  :meth:`notify` asks for a refresh now (e.g. from a registry webhook the agent receives).
  :meth:`promotion_to_agent_s` measures how long a moved alias took to serve its first decision.
* **Routing.** A request goes to the challenger when a stable hash of its ``key`` (e.g. the user
  id) falls below the challenger's traffic share (``challenger_fraction`` overrides the tag). The
  same key lands in the same group for a given share; requests without a key go to the champion.
* **Every decision says what served it**: ``policy_version`` (canonical
  ``<scenario>-policy/<n>``, or ``rules``), ``test_group`` (``champion|challenger|fallback``),
  ``propensity`` of the served action (``exploration`` > 0 samples that share of decisions from the
  policy's own distribution, so logged traffic supports off-policy evaluation) and
  ``fallback_reason``.
* **Never silent.** A state of the wrong shape raises :class:`StateError` (a ``UserError``) at the
  first call, until one state has been read (``bad_state="raise_first"``), so an integration error
  shows at once instead of serving rules for weeks; afterwards an unreadable state falls back with
  its reason (``"raise"``: always raise, ``"fallback"``: never). A failing, slow (``timeout_ms``)
  or illegal policy decision, or no policy loaded, returns the rule engine's action with
  ``fallback_reason``; :attr:`fallback_rate` and :attr:`fallbacks` count them, and the trace row
  carries the reason (``Decision.trace_fields``), which capture turns into an alert. The log gets
  one WARNING per cause, then a count every ``fallback_log_every_s`` and when a policy serves
  again (:mod:`rlops.agent_sdk.fallback_log`), not a line per decision.
* **Shadow mode.** ``shadow`` names a candidate (an alias such as ``"challenger"``, or a version)
  that decides on every request on the same observation, beside the served policy, without being
  served; its action, probabilities and version go on the same trace row
  (:class:`ShadowDecision`), and :attr:`shadow_agreement` is the share of requests where it chose
  the served action.

* **With or without torch.** ``runtime="torch"`` serves the registered pyfunc model;
  ``runtime="numpy"`` serves its network's numpy export (``policy.npz``, written with every saved
  policy: :mod:`rlops.agent_sdk.numpy_policy`), which is what an agent host with the slim
  ``rlops-agent`` package has; ``"auto"`` (default) picks torch when it is installed. Masks,
  observations and the rule engine are computed with numpy either way
  (:mod:`rlops.agent_sdk.decision_program`), from the pack's ``scenario.yaml`` only.

The state is the production state as a nested dict or flattened ``state.<path>`` keys (see
:mod:`rlops.agent_sdk.encoding`). Needs the scenario pack and MLflow (``mlflow-skinny`` suffices).
"""

from __future__ import annotations

import collections
import concurrent.futures
import importlib.util
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from rlops.agent_sdk.encoding import ObservationEncoder, StateError, observation_columns
from rlops.agent_sdk.fallback_log import FallbackLog
from rlops.agent_sdk.registry_source import RegistrySource, build_serving_state
from rlops.agent_sdk.serving import (
    CHALLENGER,
    CHAMPION,
    DEFAULT_EXPLORATION,
    EXPLORATION_DISTRIBUTIONS,
    FALLBACK,
    RULES_VERSION,
    SHADOW,
    Decision,
    LoadedPolicy,
    ServingChange,
    ServingState,
    ShadowDecision,
    choose,
    exploration_probs,
    fallback_code,
    hash_fraction,
)
from rlops.common.errors import UserError
from rlops.common.policy_ref import PolicyRef, canonical_policy
from rlops.sandbox.errors import ExprError
from rlops.sandbox.expr import CompiledExpr
from rlops.sandbox.expr_numpy import NUMPY_OPS
from rlops.sandbox.segments import compile_segment

log = logging.getLogger(__name__)

BAD_STATE_MODES = ("raise_first", "raise", "fallback")
RUNTIMES = ("auto", "torch", "numpy")


def resolve_runtime(runtime: str) -> str:
    """``torch`` or ``numpy`` for a ``runtime`` setting (``auto``: torch when it is installed)."""
    if runtime not in RUNTIMES:
        raise UserError(f"PolicyClient(runtime={runtime!r}): expected one of {', '.join(RUNTIMES)}")
    if runtime == "auto":
        return "torch" if importlib.util.find_spec("torch") is not None else "numpy"
    return runtime


class PolicyClient:
    """Decisions from the ``champion``/``challenger`` policies with a rule-engine fallback.

    Args:
        tracking_uri: the MLflow tracking (and registry) URI.
        scenario: scenario name; the registered model is ``<scenario>-policy``.
        pack_path: the scenario pack folder (encoding and the rule engine).
        challenger_fraction: share of keys routed to the challenger; None reads the
            challenger version's ``traffic_fraction`` tag (0 when absent).
        timeout_ms: a policy decision slower than this falls back to the rule engine.
        load: load the policies now (otherwise at the first :meth:`refresh`).
        refresh_every_s: seconds between registry polls (None: never; call :meth:`refresh`).
        clock: ``() -> float`` seconds; the poll period and the serving-change times are on it.
            The default (``time.monotonic``) polls from a background thread; any other clock polls
            on :meth:`decide`/:meth:`poll` once a period has passed on it.
        shadow: a candidate that decides beside the served policy without being served: an alias
            (``"challenger"``), a version (``"7"``, ``"<scenario>-policy/7"``), or None.
        exploration: share of decisions drawn from the exploration distribution instead of the
            serving policy's choice — the champion's, the challenger's or the rule engine's alike
            (0: never explore); the propensity on each decision accounts for it, so that any
            candidate can be judged off-policy on the logged traffic.
        exploration_distribution: ``policy`` (the serving policy's own distribution over the
            legal actions: cheap, since a good policy rarely puts mass on a costly action; the rule
            engine has none and explores uniformly) or ``uniform`` over the legal actions.
        no_exploration_segment: an expression over the state's fields (e.g.
            ``"user_profile.age >= 75"``) whose requests never explore.
        bad_state: ``raise_first`` (raise :class:`StateError` until one state has been read, then
            fall back), ``raise`` or ``fallback``.
        seed: seeds the exploration draws.
        http_max_retries, http_timeout_s: bounds on MLflow server calls while loading (MLflow's
            own defaults retry for minutes); variables the deployment set itself win.
        fallback_log_every_s: seconds (on ``clock``) between the log lines that count the
            fallbacks of a cause after its first WARNING.
        runtime: ``torch`` (the registered pyfunc model), ``numpy`` (its numpy export, no torch
            needed) or ``auto`` (torch when installed); :attr:`runtime` is the one in use.
    """

    def __init__(
        self,
        tracking_uri: str,
        scenario: str,
        pack_path: str | Path,
        challenger_fraction: float | None = None,
        timeout_ms: float = 50.0,
        load: bool = True,
        model_name: str | None = None,
        http_max_retries: int = 2,
        http_timeout_s: int = 10,
        *,
        refresh_every_s: float | None = 30.0,
        clock: Callable[[], float] | None = None,
        shadow: str | None = None,
        exploration: float = DEFAULT_EXPLORATION,
        exploration_distribution: str = "policy",
        no_exploration_segment: str | None = None,
        bad_state: str = "raise_first",
        seed: int = 0,
        fallback_log_every_s: float = 300.0,
        runtime: str = "auto",
    ):
        self.runtime = resolve_runtime(runtime)
        if refresh_every_s is not None and not (
            isinstance(refresh_every_s, (int, float)) and 0 < float(refresh_every_s) < float("inf")
        ):
            raise UserError(
                f"PolicyClient(refresh_every_s={refresh_every_s!r}): expected seconds > 0, or None "
                "to refresh only when refresh() is called"
            )
        if not isinstance(exploration, (int, float)) or not 0.0 <= float(exploration) <= 1.0:
            raise UserError(f"PolicyClient(exploration={exploration!r}): expected a share in [0, 1]")
        if exploration_distribution not in EXPLORATION_DISTRIBUTIONS:
            raise UserError(
                f"PolicyClient(exploration_distribution={exploration_distribution!r}): expected one of "
                f"{', '.join(EXPLORATION_DISTRIBUTIONS)}"
            )
        if bad_state not in BAD_STATE_MODES:
            raise UserError(f"PolicyClient(bad_state={bad_state!r}): expected one of {', '.join(BAD_STATE_MODES)}")
        if not isinstance(fallback_log_every_s, (int, float)) or not 0 < float(fallback_log_every_s) < float("inf"):
            raise UserError(f"PolicyClient(fallback_log_every_s={fallback_log_every_s!r}): expected seconds > 0")
        if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, (int, float)) or not 0 < timeout_ms < math.inf:
            # NaN or a negative timeout would time every decision out: all traffic on the rule engine
            raise UserError(
                f"PolicyClient(timeout_ms={timeout_ms!r}): expected a finite positive number of milliseconds "
                "(how long a policy may take to decide before the rule engine answers)"
            )
        if challenger_fraction is not None and not 0.0 <= float(challenger_fraction) <= 1.0:
            raise UserError(f"PolicyClient(challenger_fraction={challenger_fraction!r}): expected a share in [0, 1]")
        self.tracking_uri, self.scenario = tracking_uri, scenario
        self.model_name = model_name or f"{scenario}-policy"
        self.encoder = ObservationEncoder.from_pack(pack_path)
        self.source = RegistrySource(
            tracking_uri,
            scenario,
            self.model_name,
            self.encoder.columns,
            http_max_retries,
            http_timeout_s,
            self.runtime,
        )
        self.shadow_ref = PolicyRef.parse(shadow, scenario) if shadow is not None else None
        if self.shadow_ref is not None and self.shadow_ref.is_rules:
            raise UserError(
                "PolicyClient(shadow='rules'): the shadow must be a registered policy (an alias or a "
                "version); the rule engine already answers every fallback"
            )
        self.challenger_fraction_override = challenger_fraction
        self.timeout_s = float(timeout_ms) / 1000.0
        self.refresh_every_s = None if refresh_every_s is None else float(refresh_every_s)
        self.clock: Callable[[], float] = clock or time.monotonic
        self.exploration, self.bad_state, self.seed = float(exploration), bad_state, int(seed)
        self.exploration_distribution = exploration_distribution
        self.no_exploration_segment = no_exploration_segment
        self._serving = ServingState()
        self._segments: dict[str, CompiledExpr | None] = {}  # segment text → compiled (None: cannot compile)
        self.changes: list[ServingChange] = []
        self._served_since: dict[tuple[str, str], float] = {}  # (group, version) → first decision since it entered
        self.fallbacks: collections.Counter[str] = collections.Counter()
        self.fallback_log = FallbackLog(self.clock, log, float(fallback_log_every_s))
        self.decisions = 0
        self.shadow_decisions = self.shadow_agreements = self.shadow_errors = 0
        self.last_refresh_error: str | None = None
        self._state_ok = False
        self._draws = itertools.count()
        self._stats_lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._next_refresh = float("inf")
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="policy")
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        if load:
            self.refresh()
        elif self.refresh_every_s is not None:
            self._next_refresh = self.clock()  # the first decision loads
        if self.refresh_every_s is not None and clock is None:
            self._thread = threading.Thread(target=self._follow, name=f"rlops-policy-follow-{scenario}", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ following the registry
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
        """Refresh when a period has passed on the client's clock; the serving state in force.
        While another thread refreshes, it does not wait: requests keep the state in force."""
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

    def first_served_at(self, version: str | int, alias: str = CHAMPION) -> float | None:
        """The client's clock at the first decision ``version`` served as ``alias`` (``champion`` or
        ``challenger``) since it last became that alias here; None while it has served none."""
        return self._served_since.get((alias, canonical_policy(version, self.scenario)))

    def promotion_to_agent_s(self, version: str | int, moved_at: float, alias: str = CHAMPION) -> float | None:
        """Seconds on the client's clock from ``moved_at`` (when ``alias`` moved to ``version`` in the
        registry) to the first decision that version served as ``alias``; None while it has served none."""
        first = self.first_served_at(version, alias)
        return None if first is None else first - float(moved_at)

    def mark_served(self, policy: LoadedPolicy, alias: str = CHAMPION) -> None:
        """Record that ``policy`` served a decision as ``alias`` now (done by :meth:`decide`; for
        callers that run a loaded policy on a batch themselves)."""
        key = (alias, policy.ref)
        if key not in self._served_since:
            self._served_since.setdefault(key, self.clock())
        self.fallback_log.served(f"{alias} {policy.ref}")

    # ------------------------------------------------------------------ deciding
    def route(self, key: str | None, state: Mapping[str, Any] | None = None) -> str:
        """``challenger`` or ``champion`` for a request key (stable), and for a challenger serving a
        segment, the ``state`` of the request (outside the segment, or none given: the champion)."""
        serving = self._serving
        if serving.challenger_segment is None:
            return serving.route(key, self.scenario)
        if state is None:
            return serving.route(key, self.scenario)
        S = self.encoder.state_tensor(state, strict=False)
        return serving.route(key, self.scenario, self.in_segment(serving.challenger_segment, S))

    def in_segment(self, segment: str, S: np.ndarray) -> bool:
        """Whether the state row ``S[1, C]`` is in ``segment`` (:mod:`rlops.sandbox.segments`). A
        segment this pack cannot compile holds no request: the challenger serves nobody, said once."""
        if segment not in self._segments:
            try:
                self._segments[segment] = compile_segment(self.encoder.scenario.spec, segment, ops=NUMPY_OPS)
            except ExprError as exc:
                log.warning("policy client: challenger segment %r: %s; serving the challenger no traffic", segment, exc)
                self._segments[segment] = None
        compiled = self._segments[segment]
        return bool(compiled(S)[0]) if compiled is not None else False

    def decide(
        self,
        state: Mapping[str, Any],
        key: str | None = None,
        history: Sequence[str] = (),
        step: int | None = None,
        elapsed_ms: float = 0.0,
        last_error: bool = False,
    ) -> Decision:
        """Choose the action for ``state``. Raises :class:`StateError` for a state of the wrong shape
        (see ``bad_state``); any other failure is a rule-engine decision with its reason."""
        t0 = time.perf_counter()
        serving = self._serving if self._thread is not None else self.poll()  # one read: one consistent state
        with self._stats_lock:
            self.decisions += 1
        group = serving.route(key, self.scenario)
        try:
            S, mask, obs = self.encoder.encode(state, history, step, elapsed_ms, last_error)
        except (StateError, TypeError, ValueError) as exc:  # whatever the encoder cannot read is the state's fault
            if self.bad_state == "raise" or (self.bad_state == "raise_first" and not self._state_ok):
                with self._stats_lock:
                    self.decisions -= 1
                raise StateError(f"PolicyClient.decide (scenario {self.scenario}): {exc}") from None
            S, mask, _ = self.encoder.encode(state, history, step, elapsed_ms, last_error, strict=False)
            return self._fallback(S, mask, group, "bad_state", f"unreadable state: {exc}", t0)
        self._state_ok = True
        if serving.challenger_segment is not None:  # a segment stage: only its requests may meet the challenger
            group = serving.route(key, self.scenario, self.in_segment(serving.challenger_segment, S))
        policy = serving.challenger if group == CHALLENGER and serving.challenger else serving.champion
        if policy is None:
            if serving.generation == 0:
                return self._fallback(
                    S,
                    mask,
                    group,
                    "load_error",
                    "nothing loaded yet: refresh() was never called (load=False) or has not finished",
                    t0,
                )
            err = dict(serving.load_errors).get(CHAMPION) or self.last_refresh_error
            return self._fallback(
                S,
                mask,
                group,
                "load_error" if err else "no_champion",
                f"no champion policy loaded: {err}" if err else f"{self.model_name} has no champion alias yet",
                t0,
            )
        shadow = serving.shadow
        shadowed = self._pool.submit(shadow.model.predict_obs, obs) if shadow is not None else None
        try:
            out = self._predict(policy, obs)
        except concurrent.futures.TimeoutError:
            return self._fallback(
                S,
                mask,
                group,
                "timeout",
                f"policy {policy.ref} took over {self.timeout_s * 1000:.0f} ms",
                t0,
                shadow,
                shadowed,
            )
        except Exception as exc:  # noqa: BLE001 - any model failure falls back
            return self._fallback(
                S,
                mask,
                group,
                "error",
                f"policy {policy.ref} failed: {type(exc).__name__}: {exc}",
                t0,
                shadow,
                shadowed,
            )
        greedy = int(out["action_index"][0])
        legal = mask[0].tolist()
        if not 0 <= greedy < len(legal) or not legal[greedy]:
            return self._fallback(
                S,
                mask,
                group,
                "illegal_action",
                f"policy {policy.ref} chose an illegal action ({greedy})",
                t0,
                shadow,
                shadowed,
            )
        probs = np.asarray(out["probs"], dtype=np.float64)[0] * np.asarray(legal, dtype=np.float64)
        a, propensity = choose(
            greedy, exploration_probs(mask[0], probs, self.exploration_distribution), self._share(S), self._uniforms()
        )
        served_as = CHALLENGER if policy is serving.challenger else CHAMPION
        self.mark_served(policy, served_as)
        names = self.encoder.action_names
        return Decision(
            action=names[a],
            action_index=a,
            mask=legal,
            probs={n: float(p) for n, p in zip(names, probs)},
            propensity=propensity,
            entropy=float(out["entropy"][0]),
            value=float(out["value"][0]),
            policy_version=policy.ref,
            test_group=served_as,
            fallback_reason=None,
            routed_group=group,
            policy_logp=float(np.log(probs[a])) if probs[a] > 0 else None,
            shadow=self._shadow(shadow, shadowed, a, legal, t0),
            latency_ms=(time.perf_counter() - t0) * 1000.0,
            explored=a != greedy,
        )

    def _share(self, S: Any) -> float:
        """The exploration share for the state row ``S[1, C]``: none inside ``no_exploration_segment``."""
        if self.exploration <= 0.0 or self.no_exploration_segment is None:
            return self.exploration
        return 0.0 if self.in_segment(self.no_exploration_segment, S) else self.exploration

    def _predict(self, policy: LoadedPolicy, obs: np.ndarray) -> dict[str, np.ndarray]:
        """The policy's outputs for ``obs``, or ``concurrent.futures.TimeoutError`` past ``timeout_ms``.
        The numpy export decides in the caller's thread: its forward pass is a few small matrix
        products with no I/O, and a hand-off to a worker thread and back would cost more than the
        pass (two wake-ups, each delayed on a busy host); the decision falls back when it took
        longer than the timeout all the same. A torch model runs on the pool, bounded by the timeout."""
        if self.runtime == "numpy":
            started = time.perf_counter()
            out: dict[str, np.ndarray] = policy.model.predict_obs(obs)
            if time.perf_counter() - started > self.timeout_s:
                raise concurrent.futures.TimeoutError
            return out
        served = self._pool.submit(policy.model.predict_obs, obs)
        try:
            result: dict[str, np.ndarray] = served.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            served.cancel()
            raise
        return result

    def _uniforms(self) -> tuple[float, float]:
        if self.exploration <= 0.0:
            return (1.0, 0.0)
        u = self.uniforms(1)[0]
        return float(u[0]), float(u[1])

    def uniforms(self, n: int) -> np.ndarray:
        """``n`` pairs of exploration draws, reproducible from ``seed`` and the order of the calls."""
        return np.random.default_rng((self.seed, next(self._draws))).random((n, 2))

    def count_batch(self, n: int, fallbacks: Mapping[str, int], details: Mapping[str, str] | None = None) -> None:
        """Count ``n`` decisions made outside :meth:`decide` (see :mod:`rlops.agent_sdk.batch`), of
        which ``fallbacks`` fell back per cause (``details``: what each cause's log line says)."""
        with self._stats_lock:
            self.decisions += n
            for kind, k in fallbacks.items():
                if k:
                    self.fallbacks[kind] += int(k)
        for kind, k in fallbacks.items():
            self.fallback_log.fell_back(kind, (details or {}).get(kind, "in a batch of decisions"), int(k))

    def _shadow(
        self, shadow: LoadedPolicy | None, future: Any, served: int, legal: list[bool], t0: float
    ) -> ShadowDecision | None:
        if shadow is None or future is None:
            return None
        left = max(self.timeout_s - (time.perf_counter() - t0), 0.0)
        try:
            out = future.result(timeout=left)
            a = int(out["action_index"][0])
            probs = np.asarray(out["probs"], dtype=np.float64)[0] * np.asarray(legal, dtype=np.float64)
            if not 0 <= a < len(legal) or not legal[a]:
                raise ValueError(f"chose an illegal action ({a})")
        except Exception as exc:  # noqa: BLE001 - a shadow never affects what is served
            future.cancel()
            what = "timed out" if isinstance(exc, concurrent.futures.TimeoutError) else f"{type(exc).__name__}: {exc}"
            with self._stats_lock:
                self.shadow_errors += 1
            return ShadowDecision(shadow.ref, error=what)
        names = self.encoder.action_names
        agrees = a == served
        with self._stats_lock:
            self.shadow_decisions += 1
            self.shadow_agreements += int(agrees)
        return ShadowDecision(
            policy_version=shadow.ref,
            action=names[a],
            action_index=a,
            probs={n: float(p) for n, p in zip(names, probs)},
            logp=float(np.log(probs[a])) if probs[a] > 0 else None,
            served_logp=float(np.log(max(probs[served], 1e-300))),  # finite: a weight of ~0
            agrees=agrees,
        )

    def _fallback(
        self,
        S: Any,
        mask: Any,
        group: str,
        kind: str,
        detail: str,
        t0: float,
        shadow: LoadedPolicy | None = None,
        shadowed: Any = None,
    ) -> Decision:
        with self._stats_lock:
            self.fallbacks[kind] += 1
        self.fallback_log.fell_back(kind, detail)
        rule = self.encoder.rule_action(S, mask)
        legal = mask[0].tolist()
        # The rule engine explores like a policy: the first promotion away from rules is then
        # judged on logged traffic where every legal action had a chance.
        a, propensity = choose(rule, exploration_probs(mask[0]), self._share(S), self._uniforms())
        return Decision(
            action=self.encoder.action_names[a],
            action_index=a,
            mask=legal,
            probs=None,
            propensity=propensity,
            entropy=None,
            value=None,
            policy_version=RULES_VERSION,
            test_group=FALLBACK,
            fallback_reason=f"{kind}: {detail}",
            routed_group=group,
            policy_logp=None,
            shadow=self._shadow(shadow, shadowed, a, legal, t0),
            latency_ms=(time.perf_counter() - t0) * 1000.0,
            explored=a != rule,
        )

    # ------------------------------------------------------------------ rates
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

    def stats(self) -> dict[str, Any]:
        """Counters for a metrics endpoint: decisions, fallbacks by code (in all, and per cause still
        going on since its first log line), rates, shadow agreement, the serving versions, what
        could not be loaded (by group) and the last poll error."""
        s = self._serving
        return {
            "decisions": self.decisions,
            "fallbacks": dict(self.fallbacks),
            "fallback_causes": self.fallback_log.active,
            "fallback_rate": self.fallback_rate,
            "shadow_decisions": self.shadow_decisions,
            "shadow_agreement": self.shadow_agreement,
            "shadow_errors": self.shadow_errors,
            "champion": s.champion.ref if s.champion else None,
            "challenger": s.challenger.ref if s.challenger else None,
            "challenger_fraction": s.challenger_fraction,
            "shadow": s.shadow.ref if s.shadow else None,
            "generation": s.generation,
            "load_errors": dict(s.load_errors),
            "last_refresh_error": self.last_refresh_error,
        }

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.source.close()
        self.fallback_log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "BAD_STATE_MODES",
    "RUNTIMES",
    "CHALLENGER",
    "CHAMPION",
    "Decision",
    "LoadedPolicy",
    "ObservationEncoder",
    "PolicyClient",
    "ServingChange",
    "ServingState",
    "ShadowDecision",
    "StateError",
    "fallback_code",
    "hash_fraction",
    "observation_columns",
]
