"""Serve the ``champion`` policy (and a ``challenger`` split) to a production agent, follow the
registry while running, and fall back to the scenario's rule engine — never silently.

::

    from rlops.agent_sdk.policy_client import PolicyClient

    client = PolicyClient("http://mlflow:5000", "credit_approval", "scenarios/credit_approval",
                          timeout_ms=50, refresh_every_s=30, shadow="challenger")
    decision = client.decide(state, key=applicant_id, history=actions_so_far)
    current_episode().annotate(**decision.trace_fields())  # version, group, mask, logp, fallback, shadow
    executor.execute(decision.action, state)

* **Following the registry** (:mod:`rlops.agent_sdk.registry_follow`). The policies are the
  registered versions behind the aliases ``champion`` and ``challenger`` of ``<scenario>-policy``.
  Every ``refresh_every_s`` seconds the client reads the aliases and the challenger's
  ``traffic_fraction`` tag again and swaps the complete new :class:`ServingState` in as one
  reference, so a promotion, a staged share or a rollback reaches a running agent within one period;
  :meth:`notify` asks for a refresh now, :meth:`promotion_to_agent_s` measures how long it took.
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
  that decides on every request beside the served policy without being served
  (:mod:`rlops.agent_sdk.policy_answer`); its choice goes on the same trace row
  (:class:`ShadowDecision`), and :attr:`shadow_agreement` is the share of requests where it agreed.
* **With or without torch.** ``runtime`` (:class:`~rlops.agent_sdk.client_settings.ClientSettings`)
  serves the registered pyfunc model (``torch``) or its network's numpy export (``numpy``, what the
  slim ``rlops-agent`` package has: :mod:`rlops.agent_sdk.numpy_policy`). Masks, observations and the
  rule engine are computed with numpy either way (:mod:`rlops.agent_sdk.decision_program`).

The state is the production state as a nested dict or flattened ``state.<path>`` keys (see
:mod:`rlops.agent_sdk.encoding`). Needs the scenario pack and MLflow (``mlflow-skinny`` suffices).
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from rlops.agent_sdk.client_settings import ClientSettings, resolve_runtime
from rlops.agent_sdk.decision_counts import DecisionCounts
from rlops.agent_sdk.encoding import ObservationEncoder, StateError, observation_columns
from rlops.agent_sdk.policy_answer import (
    FallbackCause,
    PolicyAnswer,
    Request,
    ShadowRun,
    policy_answer,
    unloaded_cause,
)
from rlops.agent_sdk.registry_follow import RegistryFollower
from rlops.agent_sdk.registry_source import RegistrySource
from rlops.agent_sdk.serving import (
    CHALLENGER,
    CHAMPION,
    DEFAULT_EXPLORATION,
    FALLBACK,
    RULES_VERSION,
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
from rlops.sandbox.errors import ExprError
from rlops.sandbox.expr import CompiledExpr
from rlops.sandbox.expr_numpy import NUMPY_OPS
from rlops.sandbox.segments import compile_segment

log = logging.getLogger(__name__)


class PolicyClient(RegistryFollower, DecisionCounts):
    """Decisions from the ``champion``/``challenger`` policies with a rule-engine fallback; as a
    :class:`RegistryFollower` it keeps the serving state current (:meth:`refresh`, :meth:`poll`,
    :meth:`notify`, :attr:`changes`, :meth:`promotion_to_agent_s`), and as :class:`DecisionCounts` it
    counts its decisions (:attr:`fallbacks`, :attr:`fallback_rate`, :attr:`shadow_agreement`).

    Args:
        tracking_uri: the MLflow tracking (and registry) URI.
        scenario: scenario name; the registered model is ``<scenario>-policy``.
        pack_path: the scenario pack folder (encoding and the rule engine).
        load: load the policies now (otherwise at the first :meth:`refresh`).
        clock: ``() -> float`` seconds; the poll period and the serving-change times are on it.
            The default (``time.monotonic``) polls from a background thread; any other clock polls
            on :meth:`decide`/:meth:`poll` once a period has passed on it.

    Every other keyword (``challenger_fraction``, ``timeout_ms``, ``model_name``,
    ``http_max_retries``, ``http_timeout_s``, ``refresh_every_s``, ``shadow``, ``exploration``,
    ``exploration_distribution``, ``no_exploration_segment``, ``bad_state``, ``seed``,
    ``fallback_log_every_s``, ``runtime``) is a field of :class:`ClientSettings`, documented and
    checked there; :attr:`settings` holds them, and :attr:`runtime` is the runtime in use.
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
        settings = ClientSettings(
            challenger_fraction=challenger_fraction,
            timeout_ms=timeout_ms,
            model_name=model_name,
            http_max_retries=http_max_retries,
            http_timeout_s=http_timeout_s,
            refresh_every_s=refresh_every_s,
            shadow=shadow,
            exploration=exploration,
            exploration_distribution=exploration_distribution,
            no_exploration_segment=no_exploration_segment,
            bad_state=bad_state,
            seed=seed,
            fallback_log_every_s=fallback_log_every_s,
            runtime=runtime,
        )
        self.settings = settings
        self.runtime = resolve_runtime(settings.runtime)
        self.tracking_uri, self.scenario = tracking_uri, scenario
        self.model_name = settings.model_name or f"{scenario}-policy"
        self.encoder = ObservationEncoder.from_pack(pack_path)
        source = RegistrySource(
            tracking_uri,
            scenario,
            self.model_name,
            self.encoder.columns,
            settings.http_max_retries,
            settings.http_timeout_s,
            self.runtime,
        )
        RegistryFollower.__init__(
            self,
            source,
            scenario,
            settings.shadow_ref(scenario),
            settings.challenger_fraction,
            settings.refresh_every_s,
            clock or time.monotonic,
        )
        self.timeout_s = settings.timeout_s
        self.exploration, self.bad_state, self.seed = settings.exploration, settings.bad_state, settings.seed
        self.exploration_distribution = settings.exploration_distribution
        self.no_exploration_segment = settings.no_exploration_segment
        self._segments: dict[str, CompiledExpr | None] = {}  # segment text → compiled (None: cannot compile)
        DecisionCounts.__init__(self, self.clock, settings.fallback_log_every_s)
        self._state_ok = False
        self._draws = itertools.count()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="policy")
        self.start(load, background=clock is None)

    def mark_served(self, policy: LoadedPolicy, alias: str = CHAMPION) -> None:
        """Record that ``policy`` served a decision as ``alias`` now (done by :meth:`decide`; for
        callers that run a loaded policy on a batch themselves)."""
        RegistryFollower.mark_served(self, policy, alias)
        self.fallback_log.served(f"{alias} {policy.ref}")

    # ------------------------------------------------------------------ routing
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

    # ------------------------------------------------------------------ deciding
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
        serving = self.current()  # one read: one consistent state
        self.count_decisions(1)
        group = serving.route(key, self.scenario)
        try:
            S, mask, obs = self.encoder.encode(state, history, step, elapsed_ms, last_error)
        except (StateError, TypeError, ValueError) as exc:  # whatever the encoder cannot read is the state's fault
            self._raise_on_bad_state(exc)
            S, mask, _ = self.encoder.encode(state, history, step, elapsed_ms, last_error, strict=False)
            return self._fallback(Request(S, mask, group, t0), FallbackCause("bad_state", f"unreadable state: {exc}"))
        self._state_ok = True
        if serving.challenger_segment is not None:  # a segment stage: only its requests may meet the challenger
            group = serving.route(key, self.scenario, self.in_segment(serving.challenger_segment, S))
        request = Request(S, mask, group, t0)
        policy = serving.challenger if group == CHALLENGER and serving.challenger else serving.champion
        if policy is None:
            return self._fallback(request, unloaded_cause(serving, self.last_refresh_error, self.model_name))
        shadow = ShadowRun.start(serving.shadow, obs, self._pool) if serving.shadow is not None else None
        pool = None if self.runtime == "numpy" else self._pool  # see predict_within
        answer = policy_answer(policy, obs, mask[0].tolist(), self.timeout_s, pool)
        if isinstance(answer, FallbackCause):
            return self._fallback(request, answer, shadow)
        explore = exploration_probs(mask[0], answer.probs, self.exploration_distribution)
        a, propensity = choose(answer.greedy, explore, self._share(S), self._uniforms())
        return self._served(policy, serving, answer, a, propensity, request, shadow)

    def _raise_on_bad_state(self, exc: Exception) -> None:
        """Raise :class:`StateError` for an unreadable state when ``bad_state`` says so (the request
        then counts as no decision); return to fall back."""
        if self.bad_state == "raise" or (self.bad_state == "raise_first" and not self._state_ok):
            self.count_decisions(-1)
            raise StateError(f"PolicyClient.decide (scenario {self.scenario}): {exc}") from None

    def _served(
        self,
        policy: LoadedPolicy,
        serving: ServingState,
        answer: PolicyAnswer,
        a: int,
        propensity: float,
        request: Request,
        shadow: ShadowRun | None,
    ) -> Decision:
        """Record that ``policy`` served action ``a``, and the decision that says so."""
        served_as = CHALLENGER if policy is serving.challenger else CHAMPION
        self.mark_served(policy, served_as)
        names, probs, legal = self.encoder.action_names, answer.probs, request.mask[0].tolist()
        return Decision(
            action=names[a],
            action_index=a,
            mask=legal,
            probs={n: float(p) for n, p in zip(names, probs)},
            propensity=propensity,
            entropy=float(answer.out["entropy"][0]),
            value=float(answer.out["value"][0]),
            policy_version=policy.ref,
            test_group=served_as,
            fallback_reason=None,
            routed_group=request.group,
            policy_logp=float(np.log(probs[a])) if probs[a] > 0 else None,
            shadow=self._shadow(shadow, a, legal, request.t0),
            latency_ms=(time.perf_counter() - request.t0) * 1000.0,
            explored=a != answer.greedy,
        )

    def _fallback(self, request: Request, cause: FallbackCause, shadow: ShadowRun | None = None) -> Decision:
        """Count the fallback and let the rule engine answer (exploring as a policy would)."""
        self.fell_back(cause.kind, cause.detail)
        S, mask = request.S, request.mask
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
            fallback_reason=f"{cause.kind}: {cause.detail}",
            routed_group=request.group,
            policy_logp=None,
            shadow=self._shadow(shadow, a, legal, request.t0),
            latency_ms=(time.perf_counter() - request.t0) * 1000.0,
            explored=a != rule,
        )

    def _shadow(self, shadow: ShadowRun | None, served: int, legal: list[bool], t0: float) -> ShadowDecision | None:
        """The shadow's decision beside the ``served`` action (within what is left of the timeout), counted."""
        if shadow is None:
            return None
        wait_s = max(self.timeout_s - (time.perf_counter() - t0), 0.0)
        decision = shadow.decision(served, legal, wait_s, self.encoder.action_names)
        self.count_shadow(decision)
        return decision

    # ------------------------------------------------------------------ exploration
    def _share(self, S: Any) -> float:
        """The exploration share for the state row ``S[1, C]``: none inside ``no_exploration_segment``."""
        if self.exploration <= 0.0 or self.no_exploration_segment is None:
            return self.exploration
        return 0.0 if self.in_segment(self.no_exploration_segment, S) else self.exploration

    def _uniforms(self) -> tuple[float, float]:
        if self.exploration <= 0.0:
            return (1.0, 0.0)
        u = self.uniforms(1)[0]
        return float(u[0]), float(u[1])

    def uniforms(self, n: int) -> np.ndarray:
        """``n`` pairs of exploration draws, reproducible from ``seed`` and the order of the calls."""
        return np.random.default_rng((self.seed, next(self._draws))).random((n, 2))

    # ------------------------------------------------------------------ reporting
    def stats(self) -> dict[str, Any]:
        """Counters for a metrics endpoint (:meth:`DecisionCounts.count_stats`), the serving versions,
        what could not be loaded (by group) and the last poll error."""
        s = self._serving
        return {
            **self.count_stats(),
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
        RegistryFollower.close(self)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.source.close()
        self.fallback_log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
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
