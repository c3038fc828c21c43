"""Counter reward: +1 per bump, -0.1 per step."""

import torch

from rlops.sandbox.reward import component, rule_ref


@component(objective="progress", reason="the counter went up")
@rule_ref("R_PROGRESS")
def progress(t):
    return t.ns.counter - t.s.counter


@component(objective="cost", reason="step cost")
@rule_ref("R_COST")
def step_cost(t):
    return torch.full_like(t.latency_ms, -0.1)
