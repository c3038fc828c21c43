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
The default network's minibatch loss and gradient are written out (:mod:`rlops.model.ppo_grad`, pinned
against autograd); other networks and the penalties go through autograd.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.profiler import record_function  # labelled regions for `rlops profile`; free without a profiler

from rlops.common.metrics_sink import MetricsSink, NullSink
from rlops.common.ppo_config import PPOConfig
from rlops.common.progress import progress_bar
from rlops.common.seeding import seed_everything
from rlops.common.threads import set_torch_threads
from rlops.model import ppo_grad
from rlops.model.device import resolve_device
from rlops.model.early_stop import EvalPlateau, StagnationMonitor
from rlops.model.ewc import EWCPenalty
from rlops.model.masked_distributions import gumbel_sample, masked_entropy
from rlops.model.normalize import ReturnScaler
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.model.policy_io import load_policy
from rlops.model.rollout import RolloutBatch, RolloutBuffers
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
    smoothing_term,
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


# ---------------------------------------------------------------------------- PPO math
def compute_gae(
    rewards: Tensor,
    values: Tensor,
    next_value: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    final_values: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """GAE(λ) advantages and returns for a rollout of ``T`` steps × ``N`` envs (same-step autoreset).

    ``values[t]`` is V(obs_t); ``next_value`` is V of the observation after the last step. When
    step ``t`` ends an episode, obs_{t+1} already belongs to the next episode, so the bootstrap
    value is 0 if it *terminated* and ``final_values[t]`` = V(final obs) if it was *truncated*;
    either way the advantage does not flow back across the boundary.
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        nxt = next_value if t == T - 1 else values[t + 1]
        nxt = torch.where(truncated[t], final_values[t], nxt)
        delta = rewards[t] + gamma * nxt * (~terminated[t]).to(rewards.dtype) - values[t]
        last = delta + gamma * gae_lambda * (~(terminated[t] | truncated[t])).to(rewards.dtype) * last
        advantages[t] = last
    return advantages, advantages + values


def ppo_losses(
    new_logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    new_values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    clip_coef: float,
    clip_vloss: bool,
    norm_adv: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Clipped surrogate and value losses for one minibatch →
    ``pg_loss, v_loss, approx_kl, old_approx_kl, clipfrac``."""
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    with torch.no_grad():
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    if norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    if clip_vloss:
        v_clipped = old_values + (new_values - old_values).clamp(-clip_coef, clip_coef)
        v_loss = 0.5 * torch.max((new_values - returns) ** 2, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((new_values - returns) ** 2).mean()
    return pg_loss, v_loss, approx_kl, old_approx_kl, clipfrac


def clip_grad_norm(params: Sequence[Tensor], max_norm: float) -> Tensor:
    """Scale the gradients so that their global L2 norm is at most ``max_norm``; returns the norm
    before scaling. ``torch.nn.utils.clip_grad_norm_`` computes the same, but on CPU one tensor at a
    time (its fused path is for accelerators): here one norm kernel and one multiply over all of them."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    total: Tensor = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (total + 1e-6)).clamp_(max=1.0))
    return total


def explained_variance(values: Tensor, returns: Tensor) -> float:
    var = returns.var()
    return float("nan") if float(var) == 0 else float(1 - (returns - values).var() / var)


# ---------------------------------------------------------------------------- the training loop
def make_optimizer(policy: PolicyNetwork, learning_rate: float) -> torch.optim.Adam:
    """Adam (ε = 1e-5, as CleanRL). The fused kernel updates every parameter in one pass instead of
    a dozen elementwise ops per tensor (a quarter of the step's cost on CPU); the update rule is the same."""
    device = next(policy.parameters()).device
    return torch.optim.Adam(policy.parameters(), lr=learning_rate, eps=1e-5, fused=device.type in ("cpu", "cuda"))


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


def collect_rollout(
    policy: PolicyNetwork,
    env: Any,
    gen: torch.Generator,
    scaler: ReturnScaler | None,
    bufs: RolloutBuffers,
    next_obs: Tensor,
    next_mask: Tensor,
    T: int,
    device: torch.device,
) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor, Tensor, Tensor]]:
    """T steps of all N envs into ``bufs``, no host sync; call under ``torch.no_grad()``. Returns the
    next observation and mask, and the summed ``(return, length, count, illegal actions, human
    takeovers)`` of the episodes that ended."""
    ep_ret = torch.zeros((), device=device)
    ep_len = torch.zeros((), device=device)
    ep_cnt = torch.zeros((), device=device)
    illegal = torch.zeros((), device=device)
    takeover = torch.zeros((), device=device)
    for t in range(T):
        bufs.obs[t], bufs.masks[t] = next_obs, next_mask
        with record_function("rlops/policy_forward"):
            logp_all, value = policy(next_obs, next_mask)
            action = gumbel_sample(logp_all, gen)
        bufs.actions[t], bufs.values[t] = action, value
        bufs.logp[t] = logp_all.gather(1, action.unsqueeze(1)).squeeze(1)
        next_obs, reward, terminated, truncated, info = env.step(action)
        next_mask = env.action_masks()
        bufs.rewards[t] = reward if scaler is None else scaler(reward, terminated | truncated)
        bufs.terminated[t], bufs.truncated[t] = terminated, truncated
        bufs.final_obs[t] = info.final_obs
        done = (terminated | truncated).float()
        ep_ret += (info.episode_return * done).sum()
        ep_len += (info.episode_length * done).sum()
        ep_cnt += done.sum()
        illegal += info.illegal.sum()
        takeover += (info.human_takeover & (terminated | truncated)).sum()
    return next_obs, next_mask, (ep_ret, ep_len, ep_cnt, illegal, takeover)


def bootstrap_gae(
    cfg: PPOConfig, policy: PolicyNetwork, bufs: RolloutBuffers, next_obs: Tensor
) -> tuple[Tensor, Tensor]:
    """Advantages and returns ``[T, N]`` of the rollout in ``bufs``; call under ``torch.no_grad()``."""
    T, N = bufs.rewards.shape
    final_values = torch.zeros((T, N), device=bufs.rewards.device)
    trunc_idx = bufs.truncated.nonzero(as_tuple=True)  # one sync per iteration
    if trunc_idx[0].numel():
        final_values[trunc_idx] = policy.get_value(bufs.final_obs[trunc_idx])
    next_value = policy.get_value(next_obs)
    with record_function("rlops/advantages"):
        return compute_gae(
            bufs.rewards,
            bufs.values,
            next_value,
            bufs.terminated,
            bufs.truncated,
            final_values,
            cfg.gamma,
            cfg.gae_lambda,
        )


def ppo_update(
    cfg: PPOConfig,
    policy: PolicyNetwork,
    optimizer: torch.optim.Optimizer,
    gen: torch.Generator,
    ewc: EWCPenalty | None,
    ent_coef: float,
    N: int,
    minibatch_size: int,
    device: torch.device,
    batch: RolloutBatch,
) -> tuple[list[Tensor], int]:
    """``update_epochs`` passes over shuffled minibatches of the flattened ``batch``; returns the
    per-minibatch loss statistics and how many epochs ran (``target_kl`` may stop early)."""
    batch_size = batch.obs.shape[0]
    policy.train()
    # The default network's loss and gradient are written out (rlops.model.ppo_grad): the same
    # numbers as autograd, without recording and replaying a graph every minibatch.
    written_out = ppo_grad.supports(policy, ewc is not None or cfg.smoothing_coef > 0)
    fixed = ppo_grad.fixed_inputs(policy, batch.obs) if written_out else None
    params = list(policy.parameters())
    zero = torch.zeros((), device=device)
    stats: list[Tensor] = []
    epochs_run = 0
    for epoch in range(cfg.update_epochs):
        perm = torch.randperm(batch_size, generator=gen, device=device)
        for start in range(0, batch_size, minibatch_size):
            mb = perm[start : start + minibatch_size]
            with record_function("rlops/data_movement"):
                # index_select, not advanced indexing: the same rows, several times cheaper on CPU
                mb_masks, mb_actions, mb_old_logp, mb_advantages, mb_old_values, mb_returns = (
                    t.index_select(0, mb)
                    for t in (batch.masks, batch.actions, batch.logp, batch.advantages, batch.values, batch.returns)
                )
                mb_inputs = fixed.select(mb) if fixed is not None else batch.obs.index_select(0, mb)
            if isinstance(mb_inputs, ppo_grad.FixedInputs):  # labels its forward and backward itself
                pg_loss, v_loss, mb_entropy, approx_kl, old_approx_kl, clipfrac = ppo_grad.loss_and_grads(
                    policy,
                    mb_inputs,
                    mb_masks,
                    mb_actions,
                    mb_old_logp,
                    mb_advantages,
                    mb_old_values,
                    mb_returns,
                    ent_coef,
                    cfg.vf_coef,
                    cfg.clip_coef,
                    cfg.clip_vloss,
                    cfg.norm_adv,
                )
                ewc_term = smooth = zero
            else:
                with record_function("rlops/policy_forward"):
                    mb_logp_all, mb_values = policy(mb_inputs, mb_masks)
                mb_new_logp = mb_logp_all.gather(1, mb_actions.unsqueeze(1)).squeeze(1)
                mb_entropy = masked_entropy(mb_logp_all, mb_masks).mean()
                pg_loss, v_loss, approx_kl, old_approx_kl, clipfrac = ppo_losses(
                    mb_new_logp,
                    mb_old_logp,
                    mb_advantages,
                    mb_values,
                    mb_old_values,
                    mb_returns,
                    cfg.clip_coef,
                    cfg.clip_vloss,
                    cfg.norm_adv,
                )
                loss = pg_loss - ent_coef * mb_entropy + cfg.vf_coef * v_loss
                ewc_term = ewc(policy) if ewc is not None else zero
                smooth = smoothing_term(cfg, policy, mb, mb_logp_all, mb_masks, batch, N, device)
                loss = loss + ewc_term + cfg.smoothing_coef * smooth
                optimizer.zero_grad(set_to_none=True)
                with record_function("rlops/backward"):
                    loss.backward()
            with record_function("rlops/optimizer"):
                clip_grad_norm(params, cfg.max_grad_norm)
                optimizer.step()
            stats.append(
                torch.stack(
                    [
                        pg_loss.detach(),
                        v_loss.detach(),
                        mb_entropy.detach(),
                        approx_kl,
                        old_approx_kl,
                        clipfrac,
                        ewc_term.detach(),
                        smooth.detach(),
                    ]
                )
            )
        epochs_run = epoch + 1
        if cfg.target_kl is not None and float(approx_kl) > cfg.target_kl:
            break
    return stats, epochs_run


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
    "compute_gae",
    "ppo_losses",
    "explained_variance",
    "resolve_device",
    "train",
]
