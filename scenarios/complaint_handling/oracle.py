"""The best achievable policy for the complaint pack, for scoring learners.

The oracle knows what no policy can observe — how likely each offer is to resolve this complaint
(``hidden.p_apology`` … ``hidden.p_refund``) and the probability that it is resolved given what
was done so far (``hidden.p_resolved``) — but not the realised draws: like a learner it finds out
whether an offer worked only by following up. At every step it solves the case's remaining
decision problem exactly by backward induction over (belief that the case is resolved, offers
made) and takes the action with the highest expected return, so its mean return is the
attainable optimum. Step costs are taken in expectation (mean latency plus the profile's mean
jitter); the money figures come from the pack's ``reward_v1.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable

import torch

from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.pack import Pack

Tensor = torch.Tensor
OFFERS = ("offer_apology", "offer_voucher", "offer_refund")
SUPERVISOR_RESOLVES = 0.85   # escalate_to_supervisor's effect in scenario.yaml
REOFFER_FACTOR = 0.7         # a second offer resolves 0.7 times as often (scenario.yaml)
MAX_OFFERS = 2


def _reward_module(pack: Pack) -> Any:
    spec = importlib.util.spec_from_file_location(f"rlops_reward_{pack.name}_oracle", Path(pack.path) / "reward_v1.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_oracle(pack: Pack) -> Callable[[BatchedEnv], Tensor]:
    names = pack.scenario.action_names
    cols = pack.scenario.columns
    rw = _reward_module(pack)
    idx = {n: names.index(n) for n in names}
    c = {k: cols[k] for k in ("case.identified", "case.offers", "hidden.p_resolved", "customer.annual_value",
                              "hidden.p_apology", "hidden.p_voucher", "hidden.p_refund", "episode.last_action")}
    # An action executed `after` + 1 times in a row costs `penalty` (REPEAT_PENALTY in reward_v1.py).
    repeat_penalty = float(rw.REPEAT_PENALTY["penalty"]) if int(rw.REPEAT_PENALTY.get("after", 1)) == 1 else 0.0

    def step_cost(env: BatchedEnv) -> dict[str, float]:
        lo, hi = env.scenario.spec.profiles[env.profile].latency_jitter_ms
        return {a.name: rw.STEP_COST + rw.LATENCY_COST_PER_S * (a.latency_mean_ms + (lo + hi) / 2) / 1000.0
                for a in env.scenario.spec.actions}

    def act(env: BatchedEnv) -> Tensor:
        S, masks = env.S, env.action_masks()
        cost = step_cost(env)
        v = S[:, c["customer.annual_value"]] / rw.VALUE_UNIT_CNY
        first = torch.stack([S[:, c["hidden.p_apology"]], S[:, c["hidden.p_voucher"]], S[:, c["hidden.p_refund"]]])
        offer_cost = [rw.OFFER_COST[o] + cost[o] for o in OFFERS]

        def outcome(pi: Tensor) -> Tensor:      # expected retention value at the end, belief pi
            return pi * rw.RETAINED * v - (1 - pi) * rw.LOST * v

        def close(pi: Tensor) -> Tensor:
            return -cost["close_case"] + outcome(pi)

        def escalate(pi: Tensor) -> Tensor:
            return (-cost["escalate_to_supervisor"] - rw.SUPERVISOR_COST
                    + outcome(pi + (1 - pi) * SUPERVISOR_RESOLVES))

        def repeat(last: Tensor, name: str) -> Tensor:  # the repeated-action penalty of doing `name` now
            return torch.where(last == idx[name], repeat_penalty, 0.0)

        def q_values(pi: Tensor, n: int, last: Tensor, follow_up: bool = True) -> dict[str, Tensor]:
            """Expected return of each action from belief ``pi`` after ``n`` offers, ``last`` the
            previous action, acting optimally afterwards.

            ``follow_up=False`` leaves the call-back out: once the outcome is known (pi is 0 or 1)
            it only costs, and leaving it out ends the recursion.
            """
            q = {"close_case": close(pi), "escalate_to_supervisor": escalate(pi)}
            if follow_up and n >= 1:
                after = torch.full_like(last, idx["follow_up"])
                q["follow_up"] = (-cost["follow_up"] - repeat(last, "follow_up")
                                  + pi * value(torch.ones_like(pi), n, after, False)
                                  + (1 - pi) * value(torch.zeros_like(pi), n, after, False))
            if n < MAX_OFFERS:
                factor = 1.0 if n == 0 else REOFFER_FACTOR
                for k, o in enumerate(OFFERS):
                    q[o] = (-offer_cost[k] - repeat(last, o)
                            + value(pi + (1 - pi) * first[k] * factor, n + 1, torch.full_like(last, idx[o])))
            return q

        def value(pi: Tensor, n: int, last: Tensor, follow_up: bool = True) -> Tensor:
            return torch.stack(list(q_values(pi, n, last, follow_up).values())).max(0).values

        pi = S[:, c["hidden.p_resolved"]]
        last = S[:, c["episode.last_action"]].long() - 1  # code 0 is "none"
        offers = S[:, c["case.offers"]].long()
        best = torch.full((env.num_envs,), -float("inf"), device=env.device)
        choice = env.scenario.rule_actions(S, masks)  # identify first (the only legal action then)
        identified = S[:, c["case.identified"]] > 0.5
        for n in range(MAX_OFFERS + 1):
            rows = identified & (offers == n)
            if not bool(rows.any()):
                continue
            for name, q in q_values(pi, n, last).items():
                a = idx[name]
                better = rows & masks[:, a] & (q > best)
                best = torch.where(better, q, best)
                choice = torch.where(better, torch.full_like(choice, a), choice)
        return choice
    return act
