"""Episodes and the ``@rollout`` decorator: one traced record per agent step.

See :mod:`rlops.agent_sdk.tracer` for the quick start. The manual form, for agents that do not go
through an :class:`~rlops.agent_sdk.interfaces.ActionExecutor`::

    with Episode(tracer, scenario="credit_approval", policy_version="credit_approval-policy/7") as ep:
        state = ep.observe(read_state())
        ep.step(state, "fraud_check", action_mask="11100", logp=-0.2, latency_ms=35.0)
        ep.step(ep.observe(read_state()), "approve", action_mask="00110", done=True)
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from rlops.agent_sdk.interfaces import DEFAULT_HOOK_COMPONENT, EpisodeRef, ExecutionResult, RewardProvider
from rlops.agent_sdk.tracer import Tracer, _now, flatten_state, mask_text

log = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

_CURRENT: contextvars.ContextVar[Episode | None] = contextvars.ContextVar("rlops_current_episode", default=None)
_EPISODE_ATTRS = ("trace_id", "scenario", "source", "test_group", "policy_version", "reward_fn_version")
#: The policy version of decisions taken by the scenario's rule engine (``agent_sdk.serving.RULES_VERSION``).
RULES_VERSION = "rules"
HOOK_PREFIX = "hook:"


def _takes_episode(provider: RewardProvider) -> bool:
    """Whether ``provider.reward`` accepts the ``episode`` keyword (older providers take three
    arguments and are called with three)."""
    try:
        params = inspect.signature(provider.reward).parameters
    except (TypeError, ValueError):
        return False
    return "episode" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def current_episode() -> Episode:
    """The episode of the ``@rollout`` call in progress (works across threads' contexts and
    asyncio tasks); raises ``RuntimeError`` outside one."""
    ep = _CURRENT.get()
    if ep is None:
        raise RuntimeError(
            "current_episode() called outside a @rollout function or an "
            "Episode context; wrap the episode function with @rollout"
        )
    return ep


@dataclass
class _Pending:
    """The record of the last step, written once its next state is known."""

    rec: dict[str, Any]
    state: Mapping[str, Any]
    action: str
    next_state: Mapping[str, Any] | None
    noted_before: bool


class Episode:
    """One traced episode: its ids, the step counter and the step awaiting its next state.

    A step's record is written once the next state is known (the next :meth:`observe` or
    :meth:`step`, or the end of the episode), so a :class:`RewardProvider` can score
    ``(state, action, next_state)`` and the last step can be marked ``done``.

    ``episode_id``: the caller's id for this episode (e.g. the conversation or application id), so
    the same decisions traced twice (by the SDK and by OTLP/MLflow spans) are one episode to the
    duplicate check; default a new uuid. A step whose ``policy_version`` is ``rules`` and that
    carries no ``logp`` gets ``logp = 0.0``: the rule engine is deterministic, so it served its
    action with propensity 1, which off-policy evaluation needs.
    """

    def __init__(
        self,
        tracer: Tracer,
        *,
        scenario: str,
        policy_version: str,
        source: str = "live",
        test_group: str | None = None,
        reward_fn_version: str | None = None,
        trace_id: str | None = None,
        reward_provider: RewardProvider | None = None,
        episode_id: str | None = None,
    ) -> None:
        if episode_id is not None and (not isinstance(episode_id, str) or not episode_id.strip()):
            raise ValueError(f"Episode(episode_id={episode_id!r}): expected non-empty text or None")
        self.tracer = tracer
        self.episode_id = episode_id or uuid.uuid4().hex
        self.attrs: dict[str, Any] = {
            "trace_id": trace_id or uuid.uuid4().hex,
            "scenario": scenario,
            "source": source,
            "test_group": test_group,
            "policy_version": policy_version,
            "reward_fn_version": reward_fn_version,
        }
        self.reward_provider = reward_provider
        self._provider_takes_episode = reward_provider is not None and _takes_episode(reward_provider)
        self.steps = 0
        self.last_state: Mapping[str, Any] | None = None
        self._notes: dict[str, Any] = {}
        self._pending: _Pending | None = None
        self._ended = False

    @property
    def trace_id(self) -> str:
        return str(self.attrs["trace_id"])

    def set(self, **attrs: Any) -> None:
        """Change episode-level fields (``test_group``, ``policy_version``, ``trace_id``, …)
        for the steps that follow, e.g. once the A/B split is known."""
        unknown = set(attrs) - set(_EPISODE_ATTRS)
        if unknown:
            raise ValueError(
                f"Episode.set: unknown field(s) {sorted(unknown)}; episode fields "
                f"are {', '.join(_EPISODE_ATTRS)} (use annotate() for step fields)"
            )
        self.attrs.update(attrs)

    def annotate(self, **fields: Any) -> None:
        """Step fields: ``action_mask`` (list of bools or '0'/'1' string), ``logp``,
        ``entropy``, ``value``, ``fallback``, ``reward_total``, ``reward_breakdown``, or any
        extra key (kept in the record's ``extra``).

        Call it before executing the action or right after: the fields go to the step just
        executed (until the next state is observed) unless that step was annotated before it
        ran; otherwise they are kept for the next step.
        """
        pending = self._pending
        if pending is not None and not pending.noted_before:
            pending.rec.update(fields)
            if "action_mask" in fields:
                pending.rec["action_mask"] = mask_text(fields["action_mask"])
        else:
            self._notes.update(fields)

    def observe(self, state: Mapping[str, Any]) -> Mapping[str, Any]:
        """Record the state just observed (it is the next state of the previous step)."""
        self._finish(next_state=state)
        self.last_state = state
        return state

    def step(
        self,
        state: Mapping[str, Any] | None,
        action: str,
        *,
        latency_ms: float | None = None,
        error: str | None = None,
        done: bool = False,
        next_state: Mapping[str, Any] | None = None,
        ts: str | None = None,
        **fields: Any,
    ) -> None:
        """Record one step: ``action`` taken in ``state`` (default: the last observed one)."""
        if self._ended:
            raise RuntimeError(f"episode {self.episode_id} has ended; start a new one")
        state = self.last_state if state is None else state
        if state is None:
            raise ValueError(
                "Episode.step: no state given and none observed yet; pass the state or call observe() first"
            )
        self._finish(next_state=state)
        notes, self._notes = {**self._notes, **fields}, {}
        rec: dict[str, Any] = {
            **self.attrs,
            "episode_id": self.episode_id,
            "step": self.steps,
            "ts": ts or _now().isoformat(timespec="microseconds"),
            **flatten_state(state),
            "action": action,
            "latency_ms": latency_ms,
            "error": error,
            "done": False,
            "terminated": False,
            "truncated": False,
        }
        rec.update(notes)
        if "action_mask" in rec:
            rec["action_mask"] = mask_text(rec["action_mask"])
        if rec.get("policy_version") == RULES_VERSION and rec.get("logp") is None:
            rec["logp"] = 0.0
        self.steps += 1
        self.last_state = state
        # Kept pending until the next state is known (for the reward provider) and so that
        # fields annotated right after the action still reach this record.
        self._pending = _Pending(rec, state, action, next_state, noted_before=bool(notes))
        if done:
            rec.update(done=True, terminated=True)
        if next_state is not None:
            self.last_state = next_state

    def end(
        self, *, truncated: bool = False, error: str | None = None, final_state: Mapping[str, Any] | None = None
    ) -> None:
        """Finish the episode: the last step becomes ``done`` (``truncated`` when the
        episode was cut short, e.g. by an exception); ``final_state``, the state its last action
        led to, is what the reward provider scores that step on (None: not observed)."""
        if self._ended:
            return
        self._finish(next_state=final_state, done=True, terminated=not truncated, truncated=truncated, error=error)
        self._ended = True

    def _finish(
        self,
        next_state: Mapping[str, Any] | None,
        done: bool = False,
        terminated: bool = False,
        truncated: bool = False,
        error: str | None = None,
    ) -> None:
        if self._pending is None:
            return
        pending, self._pending = self._pending, None
        rec, state, action = pending.rec, pending.state, pending.action
        if pending.next_state is not None:
            next_state = pending.next_state
        if done and not rec["done"]:
            rec.update(done=True, terminated=terminated, truncated=truncated)
            if error and not rec.get("error"):
                rec["error"] = error
        if rec.get("policy_version") == RULES_VERSION and rec.get("logp") is None:
            rec["logp"] = 0.0  # annotated after the step as a rule-engine decision
        if self.reward_provider is not None:
            self._score(rec, state, action, next_state)
        self.tracer.record(rec)

    def _score(
        self, rec: dict[str, Any], state: Mapping[str, Any], action: str, next_state: Mapping[str, Any] | None
    ) -> None:
        """The provider's score as the reward hook's breakdown component(s) ``hook:<name>``, after
        any the step already carries; ``reward_total`` (the pack's reward) is left as it is."""
        provider = self.reward_provider
        assert provider is not None
        try:
            if self._provider_takes_episode:
                ref = EpisodeRef(self.trace_id, self.episode_id, int(rec["step"]), str(self.attrs["scenario"]))
                score = provider.reward(state, action, next_state, episode=ref)
            else:
                score = provider.reward(state, action, next_state)
        except Exception as exc:  # noqa: BLE001 - a scoring failure must not break the agent
            log.warning("reward provider failed on step %s: %s", rec["step"], exc)
            rec["reward_error"] = f"{type(exc).__name__}: {exc}"
            return
        if isinstance(score, Mapping):
            parts = {str(k): float(v) for k, v in score.items() if k != "total"}
        else:
            parts = {str(getattr(provider, "component", None) or DEFAULT_HOOK_COMPONENT): float(score)}
        items = [
            {
                "component": k if k.startswith(HOOK_PREFIX) else f"{HOOK_PREFIX}{k}",
                "score": v,
                "reason": f"external score {k}",
            }
            for k, v in parts.items()
        ]
        before = rec.get("reward_breakdown")
        if isinstance(before, Mapping) and isinstance(before.get("breakdown"), list):
            rec["reward_breakdown"] = {**before, "breakdown": [*before["breakdown"], *items]}
        elif isinstance(before, Mapping):  # {component: score}
            rec["reward_breakdown"] = [{"component": str(k), "score": v} for k, v in before.items() if k != "total"]
            rec["reward_breakdown"] += items
        else:
            rec["reward_breakdown"] = [*(before if isinstance(before, list) else []), *items]

    def __enter__(self) -> Episode:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        _CURRENT.reset(self._token)
        self.end(truncated=exc is not None, error=None if exc is None else f"{type(exc).__name__}: {exc}")


class TracedObserver:
    """Wraps a :class:`StateObserver`: every ``observe()`` is recorded in the episode."""

    def __init__(self, inner: Any, episode: Episode) -> None:
        self._inner, self._episode = inner, episode

    def observe(self) -> dict[str, Any]:
        state: dict[str, Any] = self._inner.observe()
        self._episode.observe(state)
        return state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TracedExecutor:
    """Wraps an :class:`ActionExecutor`: every ``execute()`` is one traced step (also when
    ``execute`` is a coroutine function or raises)."""

    def __init__(self, inner: Any, episode: Episode) -> None:
        self._inner, self._episode = inner, episode

    def execute(self, action: str, state: Mapping[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        ep = self._episode
        state = ep.last_state if state is None else state
        if state is None:  # refuse before acting, not after
            raise ValueError(
                f"execute({action!r}): no state passed and none observed yet; "
                "call observer.observe() first or pass the state"
            )
        ts = _now().isoformat(timespec="microseconds")
        t0 = time.perf_counter()
        try:
            result = self._inner.execute(action, state, *args, **kwargs)
        except Exception as exc:
            ep.step(
                state, action, ts=ts, latency_ms=(time.perf_counter() - t0) * 1e3, error=f"{type(exc).__name__}: {exc}"
            )
            raise
        if inspect.isawaitable(result):
            return self._finish_async(result, state, action, ts, t0)
        self._record(result, state, action, ts, t0)
        return result

    async def _finish_async(self, pending: Any, state: Any, action: str, ts: str, t0: float) -> Any:
        try:
            result = await pending
        except Exception as exc:
            self._episode.step(
                state, action, ts=ts, error=f"{type(exc).__name__}: {exc}", latency_ms=(time.perf_counter() - t0) * 1e3
            )
            raise
        self._record(result, state, action, ts, t0)
        return result

    def _record(self, result: Any, state: Any, action: str, ts: str, t0: float) -> None:
        measured = (time.perf_counter() - t0) * 1e3
        if isinstance(result, ExecutionResult):
            self._episode.step(
                state,
                action,
                ts=ts,
                error=result.error,
                done=result.done,
                next_state=result.next_state,
                latency_ms=measured if result.latency_ms is None else result.latency_ms,
            )
        else:
            self._episode.step(state, action, ts=ts, latency_ms=measured)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def rollout(
    tracer: Tracer,
    *,
    scenario: str,
    policy_version: str,
    source: str = "live",
    test_group: str | None = None,
    reward_fn_version: str | None = None,
    reward_provider: RewardProvider | None = None,
    trace_id: Callable[..., str] | None = None,
    observer: str = "observer",
    executor: str = "executor",
    episode_id: Callable[..., str] | None = None,
) -> Callable[[F], F]:
    """Decorate a function that runs one episode so that each of its steps is traced.

    ``observer``/``executor`` name the parameters holding the state observer and action
    executor (wrapped during the call); ``trace_id`` computes the trace id from the call's
    arguments (default: a new uuid per call, e.g. use the request id instead), ``episode_id`` the
    episode id likewise (default: a new uuid); a parameter
    named ``episode`` receives the :class:`Episode`. Works on ``async def`` functions too.
    """
    attrs = dict(
        scenario=scenario,
        policy_version=policy_version,
        source=source,
        test_group=test_group,
        reward_fn_version=reward_fn_version,
        reward_provider=reward_provider,
    )

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)

        def start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Episode, Any]:
            ep = Episode(
                tracer,
                trace_id=trace_id(*args, **kwargs) if trace_id else None,
                episode_id=episode_id(*args, **kwargs) if episode_id else None,
                **attrs,  # type: ignore[arg-type]  # attrs are Episode's own keyword arguments
            )
            bound = sig.bind_partial(*args, **kwargs)
            for name, wrap in ((observer, TracedObserver), (executor, TracedExecutor)):
                if bound.arguments.get(name) is not None:
                    bound.arguments[name] = wrap(bound.arguments[name], ep)
            if "episode" in sig.parameters and "episode" not in bound.arguments:
                bound.arguments["episode"] = ep
            return ep, bound

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                ep, bound = start(args, kwargs)
                with ep:
                    return await fn(*bound.args, **bound.kwargs)

            return run_async  # type: ignore[return-value]  # the wrapper has the decorated function's signature

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            ep, bound = start(args, kwargs)
            with ep:
                return fn(*bound.args, **bound.kwargs)

        return run  # type: ignore[return-value]  # the wrapper has the decorated function's signature

    return decorate
