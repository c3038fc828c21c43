"""The params blocks of training: policy training (PPO in the sandbox, or off-policy from logs), the
relabel step and the reward model. ``ppo:``, ``train:``, ``train.offpolicy`` and ``reward_model:`` are
generated from the algorithms' own config records, so their defaults and descriptions live there only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field

from rlops.common.offpolicy_config import OffPolicyConfig
from rlops.common.params_base import Block, block_from_dataclass
from rlops.common.ppo_config import PPOConfig
from rlops.common.reward_model_config import RewardModelConfig

#: The most environment steps a training budget may name: 10^10 is days of a large machine; beyond
#: it a budget is a typo (10^30 would run for ever, and overflows the counters it feeds).
MAX_TIMESTEPS = 10**10
_TRAIN_OWN = frozenset({"total_timesteps", "ewc_lambda", "checkpoint_every"})


if TYPE_CHECKING:

    class OffpolicyParams(Block):
        def __getattr__(self, name: str) -> Any: ...
else:
    OffpolicyParams = block_from_dataclass(
        "OffpolicyParams",
        OffPolicyConfig,
        bounds={"weight_clip": (0, None), "epochs": (1, None), "batch_size": (1, None)},
        doc="Learning from logged traffic (rlops/common/offpolicy_config.py: OffPolicyConfig), `train.source: logs`.",
    )


class _TrainStep(Block):
    source: Literal["sandbox", "logs"] = Field(
        "sandbox",
        description="what the policy learns from: sandbox (PPO in the calibrated sandbox) | logs (the logged "
        "traffic of the window, off-policy; one-step packs only, docs/training.md)",
    )
    logs_window_hours: float = Field(24, gt=0, description="logs: live traces of this many hours before the run key")
    logs_holdout_share: float = Field(
        0.2, ge=0, lt=1, description="logs: share of the logged episodes held out for the off-policy gate"
    )
    logs_split_seed: int = Field(0, description="logs: salt of the episode-id hash that picks the held-out episodes")
    offpolicy: OffpolicyParams = Field(default_factory=OffpolicyParams, description=OffpolicyParams.__doc__)
    total_timesteps: int = Field(
        1_500_000, ge=1, le=MAX_TIMESTEPS, description="budget of a full retrain (environment steps, all envs together)"
    )
    incremental_timesteps: int = Field(
        200_000, ge=1, le=MAX_TIMESTEPS, description="budget of an incremental retrain warm-started from the champion"
    )
    ewc_lambda: float = Field(2000.0, ge=0, description="EWC strength in incremental mode (0: plain fine-tuning)")
    num_envs: int | None = Field(None, ge=1, description="episodes stepped at once (null: derived from the pack)")
    profile: str | None = Field(
        None,
        description="simulation profile to train in (null: `calibrated` once a "
        "calibration exists, else the pack's default)",
    )
    checkpoint_every: int = Field(10, ge=1, description="iterations between resumable checkpoints")
    threads: Literal["auto"] | Annotated[int, Field(ge=1)] = Field(
        "auto",
        description="torch threads of the training and of every DAG task (wins over ppo.torch_threads): auto = "
        "the CPUs the process may use (affinity, cgroup quota) / the tasks its Airflow worker runs at once, at least 1",
    )
    eval_episodes: int = Field(
        1000, ge=1, description="greedy episodes scored after training (the result's mean_return)"
    )
    eval_seed: int = Field(2_000_000, description="their seeds (disjoint from evaluate.seed)")
    reward_source: Literal["scripted", "model", "blend"] = Field(
        "scripted",
        description="per-step reward: scripted (the reward function) | model (the reward model's score) "
        "| blend (scripted + reward_blend_lambda · model)",
    )
    reward_blend_lambda: float = Field(1.0, ge=0, description="weight of the reward model in `blend`")
    reward_model_centred: bool = Field(
        True, description="model/blend: the model's score minus its mean over the state's legal actions"
    )
    bc_warm_start: bool = Field(
        True, description="model/blend, full mode: behaviour-clone the top relabelled steps first"
    )
    bc_top_fraction: float = Field(
        0.5, gt=0, le=1, description="share of the scored choice steps imitated (highest reward-model score)"
    )
    bc_epochs: int = Field(10, ge=1, description="behaviour-cloning epochs")


class RelabelParams(Block):
    """Relabel step (``rlops/pipeline_steps/training/relabel.py``, ``rlops train relabel``)."""

    window_hours: float = Field(24, gt=0, description="captured traces of this many hours before the run key")


class _RewardModelStep(Block):
    pairs: int = Field(4000, ge=1, description="sandbox preference pairs per training run")


if TYPE_CHECKING:
    # Built at import by create_model from the algorithms' config records (PPOConfig,
    # RewardModelConfig): a type checker sees the step's own fields, the record's fields by name.
    class PpoParams(Block):
        def __getattr__(self, name: str) -> Any: ...

    class TrainParams(_TrainStep):
        def __getattr__(self, name: str) -> Any: ...

    class RewardModelParams(_RewardModelStep):
        def __getattr__(self, name: str) -> Any: ...
else:
    PpoParams = block_from_dataclass(
        "PpoParams",
        PPOConfig,
        exclude=frozenset({"mode", "checkpoint_dir"}),
        bounds={"total_timesteps": (1, MAX_TIMESTEPS)},
        derived={
            "num_steps": "derived from the pack's horizon (rlops/model/pack_defaults.py)",
            "gamma": "derived from the pack's horizon",
            "num_minibatches": "derived from the batch size",
        },
        doc="Masked PPO hyperparameters (rlops/common/ppo_config.py: PPOConfig); `train:` keys with the same "
        "names override them for the training step.",
    )

    TrainParams = block_from_dataclass(
        "TrainParams",
        PPOConfig,
        # torch_threads: `threads` is the step's own (auto or a count)
        exclude=frozenset({"mode", "checkpoint_dir", "torch_threads"}) | _TRAIN_OWN,
        optional=True,
        base=_TrainStep,
        doc="Policy training (rlops/pipeline_steps/training/policy.py, `rlops train policy`): the step's own "
        "keys, plus any PPOConfig field, which overrides the `ppo:` block for this step.",
    )

    RewardModelParams = block_from_dataclass(
        "RewardModelParams",
        RewardModelConfig,
        exclude=frozenset({"seed"}),
        base=_RewardModelStep,
        doc="Reward model (rlops/model/reward_model.py; pairs from rlops/model/reward_pairs.py); seeded by `seed`.",
    )


__all__ = ["MAX_TIMESTEPS", "OffpolicyParams", "PpoParams", "RelabelParams", "RewardModelParams", "TrainParams"]
