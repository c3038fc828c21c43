"""The best achievable policy for the credit pack, for scoring learners.

The oracle follows the mandatory checks, then picks the decision with the highest *expected*
return given the applicant's true default probability: for each candidate decision it simulates
the decision and the notification on a copy of the environment twice — once with the latent
default draw forcing a default and once forcing repayment — and weights the two returns by the
default probability that decision leads to. It knows what no policy can observe (the model's
default probability), but not the realised draw, so its mean return is the attainable optimum.
"""

from __future__ import annotations

import torch

from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.pack import Pack

DECISIONS = ("approve", "approve_reduced", "reject", "escalate_to_human")


def make_oracle(pack: Pack):
    names = pack.scenario.action_names
    cols = pack.scenario.columns
    c_u, c_p = cols["hidden.default_u"], cols["hidden.default_prob"]
    a_notify = names.index("send_notification")
    a_approve = names.index("approve")

    def branch_return(env: BatchedEnv, decision: int, default_u: float) -> tuple[torch.Tensor, torch.Tensor]:
        sim = BatchedEnv(env.scenario, env.reward_fn, env.num_envs, env.profile, env.device, illegal_action="noop")
        sim.load_state_dict(env.state_dict())
        sim.S[:, c_u] = default_u
        first = torch.full((env.num_envs,), decision, dtype=torch.long, device=env.device)
        _, r1, term, trunc, _ = sim.step(first)
        p_after = sim.S[:, c_p].clone()
        _, r2, _, _, _ = sim.step(torch.full_like(first, a_notify))
        # A decision that ended the episode (escalation) is not followed by a notification.
        return r1 + torch.where(term | trunc, torch.zeros_like(r2), r2), p_after

    def act(env: BatchedEnv) -> torch.Tensor:
        masks = env.action_masks()
        base = env.scenario.rule_actions(env.S, masks)
        deciding = masks[:, a_approve]
        if not bool(deciding.any()):
            return base
        best = torch.full((env.num_envs,), -float("inf"), device=env.device)
        choice = base.clone()
        p_now = env.S[:, c_p]
        for name in DECISIONS:
            d = names.index(name)
            r_default, p_d = branch_return(env, d, 0.0)
            r_repay, _ = branch_return(env, d, 1.0)
            # Approvals recompute the default probability for the approved amount; the other
            # decisions are scored against the probability at the requested amount.
            p = p_d if name.startswith("approve") else p_now
            ev = p * r_default + (1 - p) * r_repay
            better = masks[:, d] & (ev > best)
            best = torch.where(better, ev, best)
            choice = torch.where(deciding & better, torch.full_like(choice, d), choice)
        return choice
    return act
