"""What every policy training does with its candidate, whatever it learnt from (the sandbox or the
logs): the fingerprint of its inputs, the held-out evaluation, the registration as a new
``<scenario>-policy`` version (``policy_model/``, the pyfunc model the gates and the policy client
load) and the reuse of a version an identical training registered."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.agent_sdk.policy_client import observation_columns
from rlops.model.policy_io import save_policy
from rlops.pipeline_steps.infra.policy_metrics import (
    latency_p99_ms,
    policy_metrics,
    population_masks,
    segment_returns,
)
from rlops.pipeline_steps.training.summary import TrainInputs, TrainSummary
from rlops.registry import tags as T
from rlops.registry.client import policy_model_name
from rlops.registry.descriptions import MODEL_DESCRIPTION
from rlops.registry.pyfunc_policy import save_pyfunc_policy
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.policies import evaluate_policy

if TYPE_CHECKING:
    from rlops.model.policy import PolicyNetwork
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack

MODEL_ARTIFACT = "policy_model"
"""Artifact folder of a training run that holds the pyfunc model (the registered source)."""


def fingerprint(**inputs: Any) -> str:
    """sha256 of everything that decides what a run trains (not where it writes)."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class HeldOutEvaluation:
    """The trained policy, deciding greedily, on held-out sandbox episodes of the training's world."""

    mean_return: float
    completion_rate: float
    metrics: dict[str, float]
    """the comparable metrics (the keys of :mod:`rlops.pipeline_steps.infra.policy_metrics` that
    evaluation runs log too), logged to the training run"""


def evaluate_trained(
    pack: Pack, policy: PolicyNetwork, label: str, episodes: int, seed: int, profile: str | None
) -> HeldOutEvaluation:
    """The held-out evaluation of the trained policy on ``episodes`` sandbox episodes from ``seed``."""
    cpu = policy.to("cpu").eval()
    env = BatchedEnv(pack.scenario, pack.reward_fn(label), num_envs=episodes, profile=profile, illegal_action="noop")
    res = evaluate_policy(pack, lambda e: cpu.act(e.observe(), deterministic=True).action, seed=seed, env=env)
    env.reset(seed)
    segs = segment_returns(res.returns.cpu().numpy(), population_masks(res.segments, res.segment_names))
    summary = res.summary()
    metrics = policy_metrics(summary, segs, latency_p99_ms(cpu, env.observe(), 100))
    return HeldOutEvaluation(summary["mean_return"], summary["completion_rate"], metrics)


def register_policy(
    ctx: StepServices,
    run: Any,
    pack: Pack,
    policy: PolicyNetwork,
    tags: dict[str, Any],
    tmp: Path,
    description: str | None = None,
) -> str:
    """Log ``policy`` as the pyfunc model ``policy_model/`` of ``run`` and register it as a new
    ``<scenario>-policy`` version with ``tags``; returns the version."""
    meta = {
        "scenario": ctx.scenario,
        "action_names": list(pack.scenario.action_names),
        "obs_columns": observation_columns(pack.scenario.layout, pack.scenario.action_names),
        **{k: str(v) for k, v in tags.items() if k in ("reward_fn_sha256", "mode", "run_key")},
    }
    work = Path(tempfile.mkdtemp(prefix="policy-", dir=tmp))
    policy_dir = save_policy(policy, work / "policy", metadata=meta).directory
    import pandas as pd

    example = pd.DataFrame(pack.make_env(2, seed=0).observe().double().numpy(), columns=meta["obs_columns"])
    run.log_artifact(save_pyfunc_policy(policy_dir, work / MODEL_ARTIFACT, example), MODEL_ARTIFACT)
    version = ctx.tracker.register_model(
        run.run_id, MODEL_ARTIFACT, policy_model_name(ctx.scenario), tags=tags, description=description
    )
    run.set_tags({T.MODEL_VERSION: version})

    ctx.tracker.describe(policy_model_name(ctx.scenario), None, MODEL_DESCRIPTION.format(scenario=ctx.scenario))
    return version


def reused_summary(ctx: StepServices, name: str, existing: str, inputs: TrainInputs) -> TrainSummary:
    """The already registered version trained with the same fingerprint (idempotent reruns)."""
    tags = ctx.tracker.model_version_tags(name, existing)
    said = "already trained for this run key: returned the registered version"
    return TrainSummary(
        dataclasses.replace(inputs, note=(inputs.note + "; " if inputs.note else "") + said),
        model_version=existing,
        mean_return=_float(tags.get("eval_mean_return")),
        run_id=tags.get("run_id"),
        reused=True,
        dry_run=ctx.dry_run,
    )


def _float(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


__all__ = [
    "MODEL_ARTIFACT",
    "HeldOutEvaluation",
    "evaluate_trained",
    "fingerprint",
    "register_policy",
    "reused_summary",
]
