"""Masked PPO on a batched sandbox environment — CleanRL's ``ppo.py``, callable.

``train(cfg, env, tracker)`` runs clipped PPO with GAE(λ) on an environment that steps N episodes
at once (``rlops.sandbox.env.BatchedEnv``): the rollout, the advantage computation and the update all
stay on ``env.device`` as whole-batch tensor ops, with no host/device copies inside the step loop.
Masks observed during the rollout are stored and reused in the update, so the ratio and the
entropy are computed over exactly the actions that were legal.

The defaults that make it learn any pack without tuning: state features standardised with running
statistics kept in the policy (``obs_norm``), rewards scaled by the running std of the discounted
return (``reward_scale``), a linear entropy schedule, and early stopping when the greedy return on
a fixed seeded evaluation batch plateaus (handing back the best evaluated weights); rollout length,
minibatches and γ come from the pack (``rlops.model.pack_defaults.derive_defaults``).

Beyond the CleanRL core: resumable checkpoints (bit-identical continuation on CPU), reward
hot-reload between iterations, incremental (warm-start) training with an optional EWC penalty,
an optional action-smoothing penalty, and a stagnation flag. See :class:`PPOConfig` for knobs.
Those side concerns are one call each in the loop; their code is in :mod:`rlops.model.training_hooks`.

:func:`train` reads as the algorithm: each iteration collects a rollout and its GAE advantages
(:mod:`rlops.model.ppo_rollout`), flattens it, runs the clipped update over shuffled minibatches
(:mod:`rlops.model.ppo_update`), and reports; the equations themselves are in :mod:`rlops.model.ppo_math`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlops.common.metrics_sink import MetricsSink, NullSink
from rlops.common.ppo_config import PPOConfig
from rlops.common.progress import progress_bar
from rlops.common.seeding import seed_everything
from rlops.common.threads import set_torch_threads
from rlops.model.device import resolve_device
from rlops.model.early_stop import EvalPlateau, StagnationMonitor
from rlops.model.ewc import EWCPenalty
from rlops.model.normalize import ReturnScaler
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.model.policy_io import load_policy
from rlops.model.ppo_math import explained_variance
from rlops.model.ppo_rollout import bootstrap_gae, collect_rollout
from rlops.model.ppo_update import make_optimizer, ppo_update
from rlops.model.rollout import RolloutBuffers
from rlops.model.training_hooks import (
    RewardSwitch,
    anneal,
    check_device,
    checkpoint_due,
    checkpoint_to_resume,
    ewc_if_due,
    hot_reload,
    iteration_metrics,
    log_run_params,
    report_iteration,
    resume,
    save_state,
)

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """What :func:`train` hands back."""

    policy: PolicyNetwork
    iterations: int
    global_step: int
    wall_time_s: float
    final_return: float
    stagnated: bool
    history: list[dict[str, float]] = field(default_factory=list)
    reward_switches: list[RewardSwitch] = field(default_factory=list)
    last_checkpoint: Path | None = None
    reward_fn_version: str = ""
    stopped_early: bool = False
    best_eval_return: float | None = None
    best_iteration: int | None = None


def _build_policy(
    cfg: PPOConfig, env: Any, init_from: str | Path | PolicyNetwork | None, device: torch.device
) -> PolicyNetwork:
    if cfg.mode == "full":
        if init_from is not None:
            raise ValueError(
                "PPOConfig.mode is 'full' (train from scratch) but init_from was given; "
                "use mode='incremental' to warm-start from a saved policy"
            )
        return PolicyNetwork(
            PolicyConfig.from_layout(
                env.layout,
                hidden_sizes=tuple(cfg.hidden_sizes),
                embed_dim=cfg.embed_dim,
                activation=cfg.activation,
                obs_norm=cfg.obs_norm,
                obs_clip=cfg.obs_clip,
            )
        )
    if init_from is None:
        raise ValueError(
            "PPOConfig.mode is 'incremental' but no init_from policy was given "
            "(a saved policy folder or a PolicyNetwork to warm-start from)"
        )
    policy = init_from if isinstance(init_from, PolicyNetwork) else load_policy(init_from)
    want = PolicyConfig.from_layout(env.layout)
    got = policy.config
    if (got.n_features, got.n_actions, got.history_len, got.action_roles) != (
        want.n_features,
        want.n_actions,
        want.history_len,
        want.action_roles,
    ):
        raise ValueError(
            f"init_from policy expects observations of {got.n_features} features / "
            f"{got.n_actions} actions / history {got.history_len}, but the environment produces "
            f"{want.n_features} / {want.n_actions} / {want.history_len}"
            + (
                f" (roles of the actions {list(got.action_roles)} vs {list(want.action_roles)})"
                if got.action_roles != want.action_roles
                else ""
            )
            + "; it was trained on another "
            "scenario layout — train in 'full' mode instead"
        )
    import copy

    return copy.deepcopy(policy).to(device)


def _result(
    policy: PolicyNetwork,
    plateau: EvalPlateau,
    history: list[dict[str, float]],
    start_iter: int,
    global_step: int,
    wall: float,
    stagnated: bool,
    switches: list[RewardSwitch],
    last_ckpt: Path | None,
    reward_fn_sha256: str,
    plateaued: bool,
) -> TrainResult:
    final = history[-1]["episodic_return"] if history else float("nan")
    done_iters = int(history[-1]["iteration"]) if history else start_iter
    best = None if plateau.best_state is None else plateau.best
    return TrainResult(
        policy=policy.eval(),
        iterations=done_iters,
        global_step=global_step,
        wall_time_s=wall,
        final_return=final,
        stagnated=stagnated,
        history=history,
        reward_switches=switches,
        last_checkpoint=last_ckpt,
        reward_fn_version=reward_fn_sha256,
        stopped_early=plateaued,
        best_eval_return=best,
        best_iteration=plateau.best_iteration if best is not None else None,
    )


def train(
    cfg: PPOConfig,
    env: Any,
    tracker: MetricsSink | None = None,
    init_from: str | Path | PolicyNetwork | None = None,
    resume_from: str | Path | None = None,
    reward_source: Callable[[int], Any] | None = None,
    on_iteration: Callable[[int, PolicyNetwork, dict[str, float]], bool | None] | None = None,
) -> TrainResult:
    """Train a masked PPO policy on a batched environment.

    Args:
        cfg: hyperparameters and run settings.
        env: a ``BatchedEnv`` already on the device ``cfg.device`` resolves to.
        tracker: receives per-iteration metrics (``log_metrics``) and the run's params.
        init_from: ``incremental`` mode: the policy (folder or object) to warm-start from.
        resume_from: a checkpoint file, or ``"auto"`` for the newest one in ``cfg.checkpoint_dir``
            (starting fresh when there is none); the run continues exactly where it stopped.
        reward_source: called with the iteration number before each iteration; a returned reward
            function (not None) replaces the environment's one (hot reload).
        on_iteration: called after each iteration with ``(iteration, policy, metrics)``; returning
            True stops the run there (e.g. once a held-out evaluation reaches a target).
    """
    # ---- setup: device, seeds, policy, optimizer
    device = check_device(cfg, env)
    if cfg.torch_threads:
        set_torch_threads(cfg.torch_threads)
    tracker = tracker or NullSink()
    seed_everything(cfg.seed)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    policy = _build_policy(cfg, env, init_from, device).to(device)
    optimizer = make_optimizer(policy, cfg.learning_rate)
    N, T, D, A = env.num_envs, cfg.num_steps, env.layout.dim, env.layout.n_actions
    batch_size = N * T
    minibatch_size = max(batch_size // cfg.num_minibatches, 1)
    num_iterations = max(cfg.total_timesteps // batch_size, 1)
    stagnation = StagnationMonitor(cfg.stagnation_window, cfg.stagnation_tol)
    plateau = EvalPlateau(
        env,
        cfg.plateau_eval_every,
        cfg.plateau_eval_episodes,
        cfg.plateau_eval_seed,
        cfg.plateau_patience,
        cfg.plateau_min_delta,
    )
    scaler = ReturnScaler(N, cfg.gamma, device) if cfg.reward_scale else None
    ewc: EWCPenalty | None = None
    start_iter, global_step, elapsed_before = 0, 0, 0.0
    reward_fn_sha256 = env.reward_fn.version
    switches: list[RewardSwitch] = []

    # ---- resume
    ckpt_path = checkpoint_to_resume(cfg, resume_from)
    if ckpt_path is not None:
        start_iter, global_step, elapsed_before, ewc, reward_fn_sha256 = resume(
            ckpt_path, cfg, device, policy, optimizer, gen, env, stagnation, plateau, scaler
        )

    log_run_params(tracker, cfg, policy, env, batch_size, minibatch_size, num_iterations)

    # ---- rollout storage (on the env's device, reused every iteration)
    bufs = RolloutBuffers.zeros(T, N, D, A, device)

    next_obs, next_mask = env.observe(), env.action_masks()
    history: list[dict[str, float]] = []
    last_ckpt: Path | None = ckpt_path
    stagnated = plateaued = False
    t_start = time.perf_counter()
    steps_at_start = global_step

    bar = progress_bar(cfg.progress, total=num_iterations, initial=start_iter, desc="ppo", unit="it")
    for iteration in range(start_iter + 1, num_iterations + 1):
        # ---- reward hot reload (between iterations only)
        reward_fn_sha256 = hot_reload(iteration, global_step, env, reward_source, reward_fn_sha256, switches, tracker)
        ent_coef = anneal(cfg, optimizer, iteration, num_iterations)  # learning rate and entropy schedules

        # ---- rollout: T steps of all N envs, no host sync
        policy.eval()
        with torch.no_grad():
            next_obs, next_mask, episodes = collect_rollout(
                policy, env, gen, scaler, bufs, next_obs, next_mask, T, device
            )
            global_step += batch_size

            # ---- bootstrap truncated episodes from V(final obs), then GAE
            advantages, returns = bootstrap_gae(cfg, policy, bufs, next_obs)

        # ---- flatten the batch (index = t * N + n)
        batch = bufs.flatten(advantages, returns)
        ewc = ewc_if_due(cfg, ewc, policy, batch, gen, device)

        # ---- update: update_epochs passes over shuffled minibatches
        stats, epochs_run = ppo_update(cfg, policy, optimizer, gen, ewc, ent_coef, N, minibatch_size, device, batch)
        # The observation statistics move between iterations only, so one iteration's rollout and
        # update see the same normalisation.
        policy.update_obs_stats(batch.obs)

        # ---- metrics (one host copy per iteration)
        elapsed = elapsed_before + time.perf_counter() - t_start
        metrics = iteration_metrics(
            stats,
            episodes,
            explained_variance(batch.values, batch.returns),
            stagnation,
            optimizer,
            scaler,
            sps=(global_step - steps_at_start) / max(time.perf_counter() - t_start, 1e-9),
            epochs_run=epochs_run,
            iteration=iteration,
            global_step=global_step,
            elapsed_s=elapsed,
            ent_coef=ent_coef,
        )
        stagnated = bool(metrics["stagnation"])
        if plateau.due(iteration):
            metrics["eval_return"], plateaued = plateau.update(iteration, policy, env.reward_fn)
        history.append(metrics)

        # ---- checkpoint before reporting, so a kill after the report never loses the iteration
        if checkpoint_due(cfg, iteration, num_iterations):
            last_ckpt = save_state(
                cfg,
                iteration,
                global_step,
                elapsed,
                policy,
                optimizer,
                gen,
                env,
                stagnation,
                plateau,
                scaler,
                ewc,
                reward_fn_sha256,
            )
        report_iteration(metrics, stagnation, bar, tracker, global_step)
        if on_iteration is not None and on_iteration(iteration, policy, metrics):
            policy.eval()
            break
        if plateaued:
            log.info(
                "early stop at iteration %d: the evaluation return has not improved for %d evaluations "
                "(best %.4f at iteration %d)",
                iteration,
                plateau.patience,
                plateau.best,
                plateau.best_iteration,
            )
            break
    bar.close()
    if cfg.keep_best:
        plateau.restore_best(policy)

    wall = elapsed_before + time.perf_counter() - t_start
    return _result(
        policy,
        plateau,
        history,
        start_iter,
        global_step,
        wall,
        stagnated,
        switches,
        last_ckpt,
        reward_fn_sha256,
        plateaued,
    )


__all__ = [
    "PPOConfig",
    "TrainResult",
    "RewardSwitch",
    "MetricsSink",
    "NullSink",
    "StagnationMonitor",
    "resolve_device",
    "train",
]
