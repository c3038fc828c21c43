"""The training inside the policy step's MLflow run (:func:`rlops.pipeline_steps.training.policy.train_policy`
decides what to train and opens the run): the datasets the sandbox was fitted on as the run's
inputs, masked PPO from the starting point with its metrics, the held-out evaluation, the learning
curve, and the registration of the policy as a ``<scenario>-policy`` version with its lineage tags."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.model.checkpoint import latest_checkpoint
from rlops.model.ppo import train
from rlops.pipeline_steps.infra.datasets import TRAINING, calibration_dataset, parquet_dataset
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.training.candidate import evaluate_trained as _evaluate
from rlops.pipeline_steps.training.candidate import register_policy
from rlops.pipeline_steps.training.hot_reload import record_switches
from rlops.pipeline_steps.training.summary import TrainedRun, TrainInputs, TrainSummary
from rlops.registry.datasets import log_dataset_inputs
from rlops.registry.descriptions import version_description

if TYPE_CHECKING:
    from rlops.common.params_training import TrainParams
    from rlops.model.policy import PolicyNetwork
    from rlops.sandbox.pack import Pack


def log_training_inputs(services: StepServices, run: Any, cal_version: str, cal: dict[str, Any] | None) -> None:
    """The calibration the sandbox was fitted with, and the trace partitions it was fitted on, as
    the run's training datasets (nothing when the pack is used as written)."""
    if cal is None:
        return
    refs = [
        calibration_dataset(
            services.storage,
            services.uri("calibrations", services.scenario, f"{cal_version}.json"),
            f"calibration-{services.scenario}",
        )
    ]
    traces = cal.get("traces_uri")
    if traces:
        refs.append(parquet_dataset(services.storage, str(traces), f"traces-{services.scenario}"))
    log_dataset_inputs(run, refs, TRAINING)


def train_and_register(
    services: StepServices,
    settings: TrainParams,
    pack: Pack,
    env: Any,
    cfg: Any,
    run: Any,
    init: PolicyNetwork | None,
    inputs: TrainInputs,
    fp: str,
    fn_version: str,
    tmp: Path,
    poller: Any = None,
    cloned: dict[str, Any] | None = None,
) -> TrainSummary:
    """Inside ``run``: train with PPO from ``init`` (resuming the newest checkpoint of the same
    fingerprint), evaluate the policy on held-out episodes, log the curve and register the policy
    as a new version with its lineage tags (``poller``: the reward switches to pick up between
    iterations; ``cloned``: the behaviour-cloning warm start's summary)."""
    resumed = latest_checkpoint(cfg.checkpoint_dir)
    run.log_params(
        {
            "scenario": services.scenario,
            "run_key": services.run_key,
            "num_envs": inputs.num_envs,
            "threads": inputs.threads,
            "threads_setting": settings.threads,
            "profile": inputs.profile,
            "reward_fn": inputs.reward_fn,
            "resumed_from": resumed.name if resumed else "none",
            # the values only: a param cannot change when a resumed run logs it again
            **{f"signal.{k}": f"{v:g}" for k, v in inputs.reward_signals.items()},
        }
    )
    t0 = time.perf_counter()
    # Metrics in one write per 10 s, not one per iteration: over HTTP the loop would wait on each.
    with run.buffered(every_s=10.0) as sink:
        result = train(cfg, env, tracker=sink, init_from=init, resume_from="auto", reward_source=poller)
    train_seconds = time.perf_counter() - t0

    switches = record_switches(run, result.reward_switches)

    evaluation = _evaluate(
        pack, result.policy, inputs.reward_fn, settings.eval_episodes, settings.eval_seed, inputs.profile
    )
    run.log_metrics(evaluation.metrics, step=result.global_step)
    if result.history:
        run.log_figure(learning_curve(result.history), "plots/learning_curve.png")
        run.log_dict(
            {"columns": list(result.history[0]), "data": [list(r.values()) for r in result.history]},
            "metrics/history.json",
        )

    tags = {
        "reward_fn_sha256": inputs.reward_fn_sha256,
        "reward_fn": inputs.reward_fn,
        "reward_fn_model_version": fn_version,
        "calibration_version": inputs.calibration_version,
        "data_version": inputs.data_version,
        "parent_champion": inputs.parent_champion or "none",
        "mode": inputs.mode,
        "timesteps": result.global_step,
        "train_seconds": round(train_seconds, 3),
        "run_key": services.run_key,
        "train_fingerprint": fp,
        "run_id": run.run_id,
        "stagnated": str(result.stagnated).lower(),
        "eval_mean_return": round(evaluation.mean_return, 6),
        "reward_source": inputs.reward_source,
        "reward_blend_lambda": inputs.reward_blend_lambda,
        "reward_model_version": inputs.reward_model_version or "none",
        "bc_steps": (cloned or {}).get("steps_imitated", 0),
        **{f"signal.{k}": f"{v:g}" for k, v in inputs.reward_signals.items()},
        **{f"signal.{k}.status": v for k, v in inputs.reward_signal_status.items()},
    }
    version = register_policy(
        services,
        run,
        pack,
        result.policy,
        tags,
        tmp,
        description=version_description(
            services.scenario, dataclasses.asdict(inputs), evaluation.mean_return, evaluation.completion_rate
        ),
    )
    trained = TrainedRun(
        completion_rate=evaluation.completion_rate,
        train_return=result.final_return,
        iterations=result.iterations,
        timesteps=result.global_step,
        train_seconds=round(train_seconds, 3),
        stagnated=result.stagnated,
        reward_fn_model_version=fn_version,
        reward_switches=switches,
        reward_fn_sha256_final=result.reward_fn_version,
        resumed_from=resumed.name if resumed else None,
        behaviour_cloning=cloned,
    )
    return TrainSummary(
        inputs, model_version=version, mean_return=evaluation.mean_return, run_id=run.run_id, trained=trained
    )


def learning_curve(history: list[dict[str, float]]) -> Any:
    """Episodic return and entropy against environment steps (a matplotlib figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["global_step"] for r in history]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, [r["episodic_return"] for r in history], label="episodic return", color="tab:blue")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("mean episodic return")
    ax2 = ax.twinx()
    ax2.plot(steps, [r["entropy"] for r in history], label="entropy", color="tab:orange", alpha=0.6)
    ax2.set_ylabel("policy entropy")
    ax.set_title("PPO learning curve")
    fig.legend(loc="lower right")
    fig.tight_layout()
    plt.close(fig)
    return fig
