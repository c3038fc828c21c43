"""What one policy training reads, resolved once where its request enters.

:func:`resolve_training` turns a :class:`~rlops.pipeline_steps.training.request.TrainRequest` and the
run's params into a frozen :class:`TrainingSetup`: the options with the params' values filled in
where the request leaves them open, the pack compiled once (the latest calibration applied, the
business signals in force bound), that calibration, the reward function that applies and the
signal readings it declares. The training itself (:func:`rlops.pipeline_steps.training.policy.train`)
reads only this record and the run's services, so a pack is compiled and a calibration read once
per training, and what a training depends on is what this record holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.arguments import MAX_TIMESTEPS, choice, count
from rlops.common.config import resolve_local
from rlops.model.reward_source import RewardSource
from rlops.pipeline_steps.training.request import TrainRequest

if TYPE_CHECKING:
    from rlops.common.params_model import QueueConfig
    from rlops.common.params_training import PpoParams, RelabelParams, TrainParams
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.signal_store import SignalReading
    from rlops.sandbox.pack import Pack
    from rlops.sandbox.reward import RewardFunction
    from rlops.sandbox.reward_choice import RewardChoice


@dataclass(frozen=True)
class TrainingSetup:
    """One training's inputs, resolved: nothing in it is read again while the training runs."""

    request: TrainRequest
    """The options as asked (``mode``, ``timesteps``, the reward switch, the device…)."""
    source: str
    """What the policy learns from: ``sandbox`` (PPO in the calibrated sandbox) or ``logs``."""
    reward_source: RewardSource
    """The per-step reward: the reward function, the reward model, or a blend of both."""
    train: TrainParams
    """The params' ``train:`` block (the pack's overrides merged)."""
    ppo: PpoParams
    """The params' ``ppo:`` block, under ``train:``'s keys of the same name."""
    relabel: RelabelParams
    """The params' ``relabel:`` block: the window of relabelled traces a warm start clones."""
    label_queue: QueueConfig
    """The params' ``label_queue:`` block: where the finished human labels a warm start imitates are."""
    local_root: Path
    """The local working folder (checkpoints) of the project."""
    pack: Pack
    """The scenario pack, compiled once: the latest calibration applied, the signals in force bound."""
    calibration: dict[str, Any] | None
    """The latest calibration for this run key (None: the pack as written)."""
    reward: RewardChoice
    """The reward function that applies, and why."""
    signals: tuple[SignalReading, ...]
    """The readings of the business signals the reward function declares."""

    @property
    def calibration_version(self) -> str:
        return str((self.calibration or {}).get("version") or "none")

    @property
    def reward_function(self) -> RewardFunction:
        return self.pack.reward_fn(self.reward.reward_fn)


def resolve_training(ctx: StepContext, request: TrainRequest | None = None) -> TrainingSetup:
    """The :class:`TrainingSetup` of ``request`` in the run of ``ctx`` (bad options: a clear error)."""
    request = request or TrainRequest()
    choice("--mode", request.mode, ("full", "incremental"))
    if request.timesteps is not None:
        request = replace(request, timesteps=count("--timesteps", request.timesteps, maximum=MAX_TIMESTEPS))
    config = ctx.config
    train = config.train
    calibration = ctx.read_calibration("latest")
    pack = ctx.pack_with(calibration)
    reward = ctx.reward_choice(request.reward_fn, pack)
    declared = {sw.signal for sw in pack.reward_fn(reward.reward_fn).signal_weights}
    signals = tuple(r for r in ctx.signal_readings(pack) if r.name in declared) if declared else ()
    lam = request.reward_blend_lambda if request.reward_blend_lambda is not None else train.reward_blend_lambda
    reward_source = RewardSource(
        str(request.reward_source or train.reward_source), float(lam), train.reward_model_centred
    )
    return TrainingSetup(
        request=request,
        source=str(request.source or train.source),
        reward_source=reward_source,
        train=train,
        ppo=config.ppo,
        relabel=config.relabel,
        label_queue=config.label_queue,
        local_root=Path(resolve_local(config.local_dir)),
        pack=pack,
        calibration=calibration,
        reward=reward,
        signals=signals,
    )
