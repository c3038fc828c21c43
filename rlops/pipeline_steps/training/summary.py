"""What a policy training hands back: the inputs it was resolved to before it trained
(:class:`TrainInputs`), and one of three outcomes — a version it trained and registered
(:class:`TrainedRun`), the version an identical earlier training registered (reused), or what a
dry run would do (:class:`DryRunPlan`). :meth:`TrainSummary.as_dict` is the JSON the CLI prints and
the retrain DAG's ``train_policy`` task pushes to XCom."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rlops.common.step_result import StepResult

#: What a dry run says in place of the figures only a training computes.
NOT_TRAINED = "not computed: a dry run does not train (the version and its return exist once trained)"


@dataclass(frozen=True)
class TrainInputs:
    """A training's inputs, resolved once before it trains (and before a dry run stops)."""

    scenario: str
    run_key: str
    requested_mode: str
    """The mode asked for (``full`` or ``incremental``)."""
    mode: str
    """The mode used: ``incremental`` falls back to ``full`` without a champion to start from."""
    note: str
    """Why the mode used differs from the one asked for (empty when it does not)."""
    parent_champion: str | None
    """The champion version an incremental training warm-starts from."""
    timesteps_budget: int
    reward_fn: str
    """The reward function's label (``v<N>``)."""
    reward_fn_sha256: str
    reward_signals: dict[str, float]
    """The business signals the reward function reads, with the values in force."""
    reward_signal_status: dict[str, str]
    calibration_version: str
    data_version: str
    num_envs: int
    threads: int | None
    """torch threads (None: torch's own default)."""
    profile: str
    """The sandbox profile trained in (the calibrated one once there is one)."""
    checkpoint_dir: str
    reward_source: str
    reward_blend_lambda: float
    reward_model_centred: bool
    reward_model_version: str | None


@dataclass(frozen=True)
class TrainedRun:
    """What a training that ran measured."""

    completion_rate: float
    train_return: float
    iterations: int
    timesteps: int
    train_seconds: float
    stagnated: bool
    reward_fn_model_version: str
    """The ``<scenario>-reward-fn`` version holding the reward function's source."""
    reward_switches: list[dict[str, Any]]
    """Reward function switches made during the training (hot reload)."""
    reward_fn_sha256_final: str
    resumed_from: str | None
    """The checkpoint a re-run continued from."""
    behaviour_cloning: dict[str, Any] | None
    """The warm start by behaviour cloning of a learned reward (None: none)."""


@dataclass(frozen=True)
class DryRunPlan:
    """What a dry run found the training would do."""

    would_register: str
    resume_from: str | None
    warm_start: str


@dataclass(frozen=True)
class TrainSummary(StepResult):
    """One training's result: its inputs and what came of them."""

    inputs: TrainInputs
    model_version: str | None
    """The registered version (None: a dry run, which registers nothing)."""
    mean_return: float | None
    """The held-out evaluation's mean return (None: not computed)."""
    run_id: str | None = None
    reused: bool = False
    """An earlier training with the same fingerprint registered ``model_version``: nothing trained."""
    dry_run: bool = False
    trained: TrainedRun | None = None
    plan: DryRunPlan | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON of this result, flat: the inputs' fields, then the outcome's."""
        out: dict[str, Any] = dataclasses.asdict(self.inputs)
        if self.trained is not None:
            trained = dataclasses.asdict(self.trained)
            out["behaviour_cloning"] = trained.pop("behaviour_cloning")
            out.update(model_version=self.model_version, run_id=self.run_id, reused=False)
            out.update(mean_return=self.mean_return, **trained)
        elif self.plan is not None:
            out.update(dry_run=True, reused=False, model_version=NOT_TRAINED, mean_return=NOT_TRAINED)
            out.update(dataclasses.asdict(self.plan))
        else:
            out.update(model_version=self.model_version, run_id=self.run_id, reused=self.reused)
            out.update(mean_return=self.mean_return, dry_run=self.dry_run)
        return out


__all__ = ["NOT_TRAINED", "DryRunPlan", "TrainInputs", "TrainSummary", "TrainedRun"]
