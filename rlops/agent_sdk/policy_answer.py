"""What a loaded policy answers to one request of a policy client.

* :func:`policy_answer` — the served policy's outputs within the time limit, checked against the
  request's mask: a :class:`PolicyAnswer`, or the :class:`FallbackCause` for which the rule engine
  answers instead (timeout, error, illegal action);
* :func:`unloaded_cause` — why no policy could answer at all (nothing loaded yet, a load error, no
  champion alias);
* :class:`Request` — a request as the client read it (state row, mask, A/B arm, arrival time);
* :class:`ShadowRun` — the shadow candidate deciding on the same observation, in parallel, and
  what it chose (:class:`~rlops.agent_sdk.serving.ShadowDecision`); it never affects what is served.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from rlops.agent_sdk.serving import CHAMPION, LoadedPolicy, ServingState, ShadowDecision


class Request(NamedTuple):
    """One request as the client read it."""

    S: np.ndarray
    """``[1, C]``: the state row (the rule engine and the segments read it)."""
    mask: np.ndarray
    """``[1, A]``: the legal actions."""
    group: str
    """The A/B arm the request's key routed to."""
    t0: float
    """``time.perf_counter()`` when the request arrived."""


class FallbackCause(NamedTuple):
    """Why the rule engine answers a request: a code of ``FALLBACK_CODES`` and what happened."""

    kind: str
    detail: str


@dataclass(frozen=True)
class PolicyAnswer:
    """A legal choice of the served policy."""

    greedy: int
    """The policy's own (most probable) action."""
    probs: np.ndarray
    """``[A]``: its distribution, zero on the illegal actions."""
    out: dict[str, np.ndarray]
    """The model's outputs (``entropy``, ``value``, …) for the request's one row."""


def unloaded_cause(serving: ServingState, last_refresh_error: str | None, model_name: str) -> FallbackCause:
    """Why ``serving`` has no policy for a request: never loaded, a load error, or no champion yet."""
    if serving.generation == 0:
        return FallbackCause(
            "load_error", "nothing loaded yet: refresh() was never called (load=False) or has not finished"
        )
    err = dict(serving.load_errors).get(CHAMPION) or last_refresh_error
    if err:
        return FallbackCause("load_error", f"no champion policy loaded: {err}")
    return FallbackCause("no_champion", f"{model_name} has no champion alias yet")


def predict_within(
    policy: LoadedPolicy, obs: np.ndarray, timeout_s: float, pool: concurrent.futures.Executor | None
) -> dict[str, np.ndarray]:
    """The policy's outputs for ``obs``, or ``concurrent.futures.TimeoutError`` past ``timeout_s``.

    Without a ``pool`` (the numpy export) the model decides in the caller's thread: its forward pass
    is a few small matrix products with no I/O, and a hand-off to a worker thread and back would cost
    more than the pass (two wake-ups, each delayed on a busy host); the decision times out when it
    took longer all the same. A torch model runs on the pool, bounded by the timeout."""
    if pool is None:
        started = time.perf_counter()
        out: dict[str, np.ndarray] = policy.model.predict_obs(obs)
        if time.perf_counter() - started > timeout_s:
            raise concurrent.futures.TimeoutError
        return out
    served = pool.submit(policy.model.predict_obs, obs)
    try:
        result: dict[str, np.ndarray] = served.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        served.cancel()
        raise
    return result


def policy_answer(
    policy: LoadedPolicy,
    obs: np.ndarray,
    legal: Sequence[bool],
    timeout_s: float,
    pool: concurrent.futures.Executor | None,
) -> PolicyAnswer | FallbackCause:
    """The served policy's choice for ``obs`` (one row) if it answers in time with a legal action."""
    try:
        out = predict_within(policy, obs, timeout_s, pool)
    except concurrent.futures.TimeoutError:
        return FallbackCause("timeout", f"policy {policy.ref} took over {timeout_s * 1000:.0f} ms")
    except Exception as exc:  # noqa: BLE001 - any model failure falls back
        return FallbackCause("error", f"policy {policy.ref} failed: {type(exc).__name__}: {exc}")
    greedy = int(out["action_index"][0])
    if not 0 <= greedy < len(legal) or not legal[greedy]:
        return FallbackCause("illegal_action", f"policy {policy.ref} chose an illegal action ({greedy})")
    probs = np.asarray(out["probs"], dtype=np.float64)[0] * np.asarray(legal, dtype=np.float64)
    return PolicyAnswer(greedy, probs, out)


@dataclass(frozen=True)
class ShadowRun:
    """The shadow candidate deciding on a request's observation, started beside the served policy."""

    policy: LoadedPolicy
    future: concurrent.futures.Future[Any]

    @classmethod
    def start(cls, shadow: LoadedPolicy, obs: np.ndarray, pool: concurrent.futures.Executor) -> ShadowRun:
        return cls(shadow, pool.submit(shadow.model.predict_obs, obs))

    def decision(self, served: int, legal: list[bool], wait_s: float, action_names: Sequence[str]) -> ShadowDecision:
        """What the shadow chose, waiting at most ``wait_s``, beside the ``served`` action; a shadow
        that fails, times out or chooses an illegal action gives a decision with its ``error``."""
        try:
            out = self.future.result(timeout=wait_s)
            a = int(out["action_index"][0])
            probs = np.asarray(out["probs"], dtype=np.float64)[0] * np.asarray(legal, dtype=np.float64)
            if not 0 <= a < len(legal) or not legal[a]:
                raise ValueError(f"chose an illegal action ({a})")
        except Exception as exc:  # noqa: BLE001 - a shadow never affects what is served
            self.future.cancel()
            what = "timed out" if isinstance(exc, concurrent.futures.TimeoutError) else f"{type(exc).__name__}: {exc}"
            return ShadowDecision(self.policy.ref, error=what)
        return ShadowDecision(
            policy_version=self.policy.ref,
            action=action_names[a],
            action_index=a,
            probs={n: float(p) for n, p in zip(action_names, probs)},
            logp=float(np.log(probs[a])) if probs[a] > 0 else None,
            served_logp=float(np.log(max(probs[served], 1e-300))),  # finite: a weight of ~0
            agrees=a == served,
        )


__all__ = ["FallbackCause", "PolicyAnswer", "Request", "ShadowRun", "policy_answer", "predict_within", "unloaded_cause"]
