"""What a policy training is asked to do: the options of ``rlops train policy`` and of the retrain
DAGs' ``train_policy`` task, declared once (see :mod:`rlops.common.step_request`)."""

from __future__ import annotations

from dataclasses import dataclass

from rlops.common.arguments import MAX_EPISODES, MAX_TIMESTEPS
from rlops.common.step_request import option

REWARD_SOURCES = ("scripted", "model", "blend")
TRAIN_SOURCES = ("sandbox", "logs")
#: The options every pack DAG accepts, with the pack's resolved value as the Param default (a drift
#: run passes them on to the retrain it triggers); the retrain DAGs accept the others too.
RESOLVED_OPTIONS = ("reward_fn", "timesteps", "mode")


@dataclass(frozen=True)
class TrainRequest:
    """One training run's options; ``None`` leaves an option to the pack's resolved params."""

    source: str | None = option(
        None,
        choices=TRAIN_SOURCES,
        help="what the policy learns from: PPO in the calibrated sandbox, or the logged traffic of the window "
        "(one-step packs only; see docs/training.md) (default: params train.source)",
    )
    mode: str = option(
        "full", choices=("full", "incremental"), help="train from scratch or warm-start from the champion"
    )
    timesteps: int | None = option(
        None,
        minimum=1_000,
        maximum=MAX_TIMESTEPS,
        help="PPO environment steps (default: params train.total_timesteps, or train.incremental_timesteps "
        "in incremental mode)",
    )
    reward_fn: str | None = option(
        None,
        pattern=r"v\d+",
        cli=False,  # the command shares --reward-fn with the others (rlops.commands.common_args)
        help="reward function of the pack (reward_<label>.py), e.g. v1 (default: the pack's params "
        "reward_fn, else the project's, else the pack's newest)",
    )
    reward_source: str | None = option(
        None,
        choices=REWARD_SOURCES,
        help="per-step reward: the reward function, the reward model, or both (default: params train.reward_source)",
    )
    reward_blend_lambda: float | None = option(
        None,
        minimum=0,
        help="weight of the reward model's score in 'blend' (default: params train.reward_blend_lambda)",
    )
    reward_model_version: str | None = option(
        None,
        dag=False,  # the retrain DAG trains with the reward model its relabel task used
        digest=False,
        help="version of <scenario>-reward-model for 'model'/'blend' (default: the newest)",
    )
    reward_switch_to: str | None = option(
        None,
        pattern=r"v\d+",
        cli=False,  # a running training switches with `rlops train switch-reward`
        help="hot reload: switch training to this reward function (v<N>) at reward_switch_at_iteration "
        "(default: no switch)",
    )
    reward_switch_at_iteration: int | None = option(
        None, minimum=1, cli=False, help="PPO iteration of the reward switch (default: the first)"
    )
    device: str | None = option(None, dag=False, digest=False, help="cpu, cuda or auto (default: params ppo.device)")

    @property
    def reward_switch(self) -> tuple[int, str] | None:
        """``(iteration, label)`` of a scheduled reward switch, if any."""
        if not self.reward_switch_to:
            return None
        return (self.reward_switch_at_iteration or 1, self.reward_switch_to)


#: The longest a search may be given: a year of seconds.
MAX_BUDGET_S = 366 * 24 * 3600.0


@dataclass(frozen=True)
class TuneRequest:
    """A hyperparameter search's options (``rlops train tune``; see
    :mod:`rlops.pipeline_steps.training.tune`)."""

    trials: int = option(20, minimum=1, maximum=10_000, dag=False, digest=False, help="at most this many trials")
    budget_s: float | None = option(
        None,
        minimum=0.001,
        maximum=MAX_BUDGET_S,
        dag=False,
        digest=False,
        help="stop starting trials after this many seconds (default: no limit)",
    )
    timesteps: int = option(
        200_000, minimum=1, maximum=MAX_TIMESTEPS, dag=False, digest=False, help="environment steps per trial"
    )
    eval_episodes: int = option(
        500,
        minimum=1,
        maximum=MAX_EPISODES,
        dag=False,
        digest=False,
        help="held-out greedy episodes that score a trial",
    )
    eval_seed: int = option(
        3_000_000,
        minimum=0,
        dag=False,
        digest=False,
        help="seed of the held-out episodes that score every trial; apart from train.eval_seed's, so the "
        "episodes that choose a setting are not those the training step reports it on",
    )
    seed: int = option(0, minimum=0, dag=False, digest=False, help="seed of the search's sampler")
    reward_fn: str | None = option(
        None,
        pattern=r"v\d+",
        cli=False,  # the command shares --reward-fn with the others (rlops.commands.common_args)
        dag=False,
        digest=False,
        help="reward function trials train and are scored on (default: as training chooses it)",
    )
    device: str | None = option(None, dag=False, digest=False, help="cpu, cuda or auto (default: params ppo.device)")
    write: bool = option(
        False,
        dag=False,
        digest=False,
        help="write the best settings into the pack's params.yaml (ppo: and train: num_envs)",
    )
