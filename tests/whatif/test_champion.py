"""The what-if compares with the registry's champion when there is one of the pack's observation
layout, and says why not otherwise."""

from __future__ import annotations

from pathlib import Path

import torch

from rlops.common.config import load_params
from rlops.common.policy_ref import policy_model_name
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.model.policy_io import save_policy
from rlops.pipeline_steps.infra.context import StepContext
from rlops.registry.client import Tracker
from rlops.sandbox.pack import Pack
from rlops.whatif.run import registry_champion


def test_the_registry_champion_is_the_comparison(rlops_home: Path, tmp_tracking: str, credit: Pack) -> None:
    ctx = StepContext.create(scenario="credit_approval", params=load_params())
    dim = credit.scenario.layout.dim
    assert registry_champion(ctx, dim, rlops_home / "dl") == (None, "credit_approval-policy has no champion")
    torch.manual_seed(0)
    save_policy(PolicyNetwork(PolicyConfig.from_layout(credit.scenario.layout)), rlops_home / "policy")
    tracker = Tracker(tmp_tracking, "credit_approval")
    with tracker.start_run("train") as run:
        run.log_artifact(rlops_home / "policy", "policy")
        version = tracker.register_model(run.run_id, "policy", policy_model_name("credit_approval"))
    tracker.set_alias(policy_model_name("credit_approval"), "champion", version)
    network, desc = registry_champion(ctx, dim, rlops_home / "dl")
    assert network is not None and desc == f"champion v{version}"
    assert registry_champion(ctx, dim + 3, rlops_home / "dl3") == (
        None,
        f"champion v{version} reads another observation layout",
    )
