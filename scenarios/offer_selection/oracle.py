"""The best achievable policy for the offer-selection pack, for scoring learners.

A visit is one decision, so the Bayes-optimal policy is greedy: show the legal offer with the
highest expected reward, ``click probability × CLICK_VALUE − the offer's cost``. The oracle reads
each offer's click probability from the pack itself — the expression the offer's effect assigns to
``hidden.click_prob``, evaluated on the user's hidden state (the user's interests, which no policy
observes) — but not the click draw, so its mean return is the attainable optimum. Reading the
compiled expressions keeps the oracle right in a calibrated world, whose fitted factors rewrite
them. The money figures come from the pack's ``reward_v1.py``; an offer-service failure (no offer
shown, nothing earned or spent) is as likely for every offer and does not change the choice.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

import torch

from rlops.sandbox.compile import CompiledScenario
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.expr import CompiledExpr
from rlops.sandbox.pack import Pack

Tensor = torch.Tensor
CLICK_PROB = "hidden.click_prob"


def _reward_module(pack: Pack) -> Any:
    spec = importlib.util.spec_from_file_location(f"rlops_reward_{pack.name}_oracle", Path(pack.path) / "reward_v1.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def click_prob_exprs(scenario: CompiledScenario) -> list[CompiledExpr]:
    """Per action, the compiled expression its effects assign to ``hidden.click_prob``."""
    col = scenario.columns[CLICK_PROB]
    out = []
    for name, effects in zip(scenario.action_names, scenario.effects):
        found = [v for e in effects for c, v, _ in e.assigns if c == col and isinstance(v, CompiledExpr)]
        if not found:
            raise ValueError(f"offer {name!r} sets no {CLICK_PROB}")
        out.append(found[0])
    return out


def make_oracle(pack: Pack) -> Callable[[BatchedEnv], Tensor]:
    rw = _reward_module(pack)
    click_prob_exprs(pack.scenario)  # a pack whose offers set no click probability fails here, at load
    tier_of = {name: tier for tier, names in rw.OFFERS_BY_TIER.items() for name in names}
    cost = torch.tensor([rw.OFFER_COST[tier_of[n]] for n in pack.scenario.action_names])

    def action_values(env: BatchedEnv) -> Tensor:
        """Expected reward of every offer ``[N, A]`` (−inf where illegal): the offer is shown unless
        the offer service fails, and then clicked with its probability."""
        S, masks = env.S, env.action_masks()
        # The environment's own scenario, not the pack's: a calibrated or perturbed world compiles
        # the same offers with its own expressions.
        p = torch.stack([e(S).float() for e in click_prob_exprs(env.scenario)], dim=1).clamp(0.0, 1.0)
        shown = 1.0 - env.scenario.profiles[env.profile]["error_rate"].to(S.device)
        value = shown * (p * rw.CLICK_VALUE - cost.to(S.device))
        return torch.where(masks, value, torch.full_like(value, -float("inf")))

    def act(env: BatchedEnv) -> Tensor:
        return action_values(env).argmax(dim=1)

    # Exact values for the reward model's preference pairs (rlops.model.reward_pairs): a few
    # simulated replicas of a visit almost never see a click.
    act.action_values = action_values  # type: ignore[attr-defined]
    return act
