"""A policy client's decisions for a whole batch of episodes: the same serving state, exploration,
propensities and rule-engine fallback as :meth:`PolicyClient.decide`, for callers that step many
simulated or replayed episodes at once (``rlops.sandbox.traces.rollout_traces``).

::

    serving = client.poll()                                  # one consistent state for the batch
    act = batch_policy(client, "challenger", serving)
    rows = rollout_traces(pack, act, 500, policy_version=serving_version(serving, "challenger"), ...)

Each call of ``act(env)`` returns the actions and, per row, ``logp`` (log of the propensity the
client served the action with), ``entropy``, ``value`` and ``fallback`` (the policy's action was
illegal, or no policy is loaded: the rule engine's action, propensity 1) with its ``fallback_reason``
(``"<code>: <detail>"``, as on a single decision). The client's counters
(:attr:`PolicyClient.decisions`, :attr:`PolicyClient.fallbacks`: every row ``act`` decides) and
:meth:`PolicyClient.mark_served` see these decisions too, so ``promotion_to_agent_s`` holds for
batched traffic as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.agent_sdk.serving import (
    CHALLENGER,
    CHAMPION,
    RULES_VERSION,
    LoadedPolicy,
    ServingState,
    choose_batch,
    exploration_probs,
)

if TYPE_CHECKING:
    from rlops.agent_sdk.policy_client import PolicyClient


def served_policy(serving: ServingState, group: str) -> LoadedPolicy | None:
    """The policy that serves ``group`` in ``serving`` (a challenger arm without a challenger: the champion)."""
    challenger = serving.challenger
    return challenger if group == CHALLENGER and challenger is not None and challenger.loaded else serving.champion


def serving_version(serving: ServingState, group: str) -> str:
    """The canonical version that serves ``group`` (``rules`` when nothing is loaded)."""
    policy = served_policy(serving, group)
    return policy.ref if policy is not None else RULES_VERSION


def illegal_reasons(legal: np.ndarray, reason: str) -> np.ndarray:
    """Per row: None where the policy's action was legal, ``reason`` where it fell back."""
    out = np.full(len(legal), None, dtype=object)
    out[~legal] = reason
    return out


def batch_policy(
    client: PolicyClient, group: str = CHAMPION, serving: ServingState | None = None
) -> Callable[[Any], tuple[Any, dict[str, Any]]]:
    """``act(env) -> (actions, extras)`` deciding as ``client`` does for requests routed to ``group``."""
    import torch

    serving = serving if serving is not None else client.poll()
    policy = served_policy(serving, group)
    alias = CHALLENGER if policy is not None and policy is serving.challenger else CHAMPION
    eps = client.exploration

    def act(env: Any) -> tuple[Any, dict[str, Any]]:
        mask = env.action_masks()
        rules = env.scenario.rule_actions(env.S, mask)
        n = int(mask.shape[0])
        if policy is None:
            err = dict(serving.load_errors).get(CHAMPION) or client.last_refresh_error
            kind = "load_error" if err else "no_champion"
            detail = f"no champion policy loaded: {err}" if err else f"{client.model_name} has no champion alias yet"
            client.count_batch(n, {kind: n}, {kind: detail})
            reason = np.full(n, f"{kind}: {detail}", dtype=object)
            rule = rules.cpu().numpy().astype(np.int64)
            u = client.uniforms(n) if eps > 0.0 else np.ones((n, 2))
            a, propensity = choose_batch(rule, exploration_probs(mask.cpu().numpy()), eps, u)
            return torch.as_tensor(a, dtype=torch.int64, device=mask.device), {
                "fallback": torch.ones(n, dtype=torch.bool),
                "logp": torch.as_tensor(np.log(propensity), dtype=torch.float32),
                "fallback_reason": reason,
                "explored": torch.as_tensor(a != rule),
            }
        out = policy.model.predict_obs(env.observe().cpu().numpy())
        legal_mask = mask.cpu().numpy()
        probs = np.asarray(out["probs"], dtype=np.float64) * legal_mask
        greedy = np.asarray(out["action_index"], dtype=np.int64)
        u = client.uniforms(n) if eps > 0.0 else np.ones((n, 2))
        a, propensity = choose_batch(
            greedy, exploration_probs(legal_mask, probs, client.exploration_distribution), eps, u
        )
        legal = legal_mask[np.arange(n), a]
        a = np.where(legal, a, rules.cpu().numpy())
        propensity = np.where(legal, propensity, 1.0)
        illegal = f"policy {policy.ref} chose an illegal action"
        client.count_batch(n, {"illegal_action": int((~legal).sum())}, {"illegal_action": illegal})
        if legal.any():
            client.mark_served(policy, alias)
        return torch.as_tensor(a, dtype=torch.int64, device=mask.device), {
            "logp": torch.as_tensor(np.log(propensity), dtype=torch.float32),
            "entropy": torch.as_tensor(np.asarray(out["entropy"]), dtype=torch.float32),
            "value": torch.as_tensor(np.asarray(out["value"]), dtype=torch.float32),
            "fallback": torch.as_tensor(~legal),
            "fallback_reason": illegal_reasons(legal, f"illegal_action: {illegal}"),
            "explored": torch.as_tensor(legal & (a != greedy)),
        }

    return act


__all__ = ["batch_policy", "served_policy", "serving_version"]
