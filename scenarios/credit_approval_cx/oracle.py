"""The best achievable policy for the pack's *true* objective (scripted reward + satisfaction).

A retired applicant's case goes to a human underwriter at once (the satisfaction bonus outweighs
any loan margin); every other case is decided as the credit pack's oracle decides it (expected
return over the latent default draw).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch


def _credit_oracle():
    path = Path(__file__).resolve().parent.parent / "credit_approval" / "oracle.py"
    spec = importlib.util.spec_from_file_location("rlops_credit_oracle_base", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_oracle


def make_oracle(pack):
    base = _credit_oracle()(pack)
    names = pack.scenario.action_names
    a_escalate = names.index("escalate_to_human")
    col = pack.scenario.columns["user_profile.employment"]
    retired = float(pack.scenario.fields["user_profile.employment"].values.index("retired"))

    def act(env) -> torch.Tensor:
        choice = base(env)
        escalate = (env.S[:, col] == retired) & env.action_masks()[:, a_escalate]
        return torch.where(escalate, torch.full_like(choice, a_escalate), choice)
    return act
