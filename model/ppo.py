"""Masked PPO on a batched sandbox environment — CleanRL's ``ppo.py``, callable.

``train(cfg, env, tracker)`` runs clipped PPO with GAE(λ) on an environment that steps N episodes
at once (``sandbox.env.BatchedEnv``): the rollout, the advantage computation and the update all
stay on ``env.device`` as whole-batch tensor ops, with no host/device copies inside the step loop.
Masks observed during the rollout are stored and reused in the update, so the ratio and the
entropy are computed over exactly the actions that were legal.

The defaults that make it learn any pack without tuning: state features standardised with running
statistics kept in the policy (``obs_norm``), rewards scaled by the running std of the discounted
return (``reward_scale``), a linear entropy schedule, and early stopping when the greedy return on
a fixed seeded evaluation batch plateaus (handing back the best evaluated weights); rollout length,
minibatches and γ come from the pack (``PPOConfig.for_pack``).

Beyond the CleanRL core: resumable checkpoints (bit-identical continuation on CPU), reward
hot-reload between iterations, incremental (warm-start) training with an optional EWC penalty,
an optional action-smoothing penalty, and a stagnation flag. See :class:`PPOConfig` for knobs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.profiler import record_function  # labelled regions for `rlops profile`; free without a profiler

from model.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from model.early_stop import EvalPlateau, StagnationMonitor
from model.ewc import EWCPenalty, make_ewc, smoothing_kl
from model.normalize import ReturnScaler
from model.policy import PolicyConfig, PolicyNetwork, gumbel_sample, load_policy, masked_entropy
from model.ppo_config import PPOConfig, resolve_device
from common.metrics_sink import MetricsSink, NullSink
from common.seeding import seed_everything

log = logging.getLogger(__name__)


@dataclass
class RewardSwitch:
    """A reward function change picked up between two iterations."""

    iteration: int
    global_step: int
    old_version: str
    new_version: str


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
def compute_gae(rewards: Tensor, values: Tensor, next_value: Tensor, terminated: Tensor, truncated: Tensor,
                final_values: Tensor, gamma: float, gae_lambda: float) -> tuple[Tensor, Tensor]:
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


def ppo_losses(new_logp: Tensor, old_logp: Tensor, advantages: Tensor, new_values: Tensor, old_values: Tensor,
               returns: Tensor, clip_coef: float, clip_vloss: bool, norm_adv: bool
               ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Clipped surrogate and value losses for one minibatch → ``pg_loss, v_loss, approx_kl, old_approx_kl, clipfrac``."""
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


def explained_variance(values: Tensor, returns: Tensor) -> float:
    var = returns.var()
    return float("nan") if float(var) == 0 else float(1 - (returns - values).var() / var)


# ---------------------------------------------------------------------------- the training loop
def _build_policy(cfg: PPOConfig, env: Any, init_from: str | Path | PolicyNetwork | None,
                  device: torch.device) -> PolicyNetwork:
    if cfg.mode == "full":
        if init_from is not None:
            raise ValueError("PPOConfig.mode is 'full' (train from scratch) but init_from was given; "
                             "use mode='incremental' to warm-start from a saved policy")
        return PolicyNetwork(PolicyConfig.from_layout(env.layout, hidden_sizes=tuple(cfg.hidden_sizes),
                                                      embed_dim=cfg.embed_dim, activation=cfg.activation,
                                                      obs_norm=cfg.obs_norm, obs_clip=cfg.obs_clip))
    if init_from is None:
        raise ValueError("PPOConfig.mode is 'incremental' but no init_from policy was given "
                         "(a saved policy folder or a PolicyNetwork to warm-start from)")
    policy = init_from if isinstance(init_from, PolicyNetwork) else load_policy(init_from)
    want = PolicyConfig.from_layout(env.layout)
    got = policy.config
    if (got.n_features, got.n_actions, got.history_len) != (want.n_features, want.n_actions, want.history_len):
        raise ValueError(f"init_from policy expects observations of {got.n_features} features / "
                         f"{got.n_actions} actions / history {got.history_len}, but the environment produces "
                         f"{want.n_features} / {want.n_actions} / {want.history_len}; it was trained on another "
                         "scenario layout — train in 'full' mode instead")
    import copy
    return copy.deepcopy(policy).to(device)


def train(cfg: PPOConfig, env: Any, tracker: MetricsSink | None = None,
          init_from: str | Path | PolicyNetwork | None = None, resume_from: str | Path | None = None,
          reward_source: Callable[[int], Any] | None = None,
          on_iteration: Callable[[int, PolicyNetwork, dict[str, float]], bool | None] | None = None) -> TrainResult:
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
    device = resolve_device(cfg.device)
    if env.device.type != device.type:
        raise ValueError(f"the environment is on {env.device} but PPOConfig.device resolves to {device}; "
                         f"create it with pack.make_env(..., device='{device.type}') so no step crosses devices")
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    tracker = tracker or NullSink()
    seed_everything(cfg.seed)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    policy = _build_policy(cfg, env, init_from, device).to(device)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate, eps=1e-5)
    N, T, D, A = env.num_envs, cfg.num_steps, env.layout.dim, env.layout.n_actions
    batch_size = N * T
    minibatch_size = max(batch_size // cfg.num_minibatches, 1)
    num_iterations = max(cfg.total_timesteps // batch_size, 1)
    stagnation = StagnationMonitor(cfg.stagnation_window, cfg.stagnation_tol)
    plateau = EvalPlateau(env, cfg.plateau_eval_every, cfg.plateau_eval_episodes, cfg.plateau_eval_seed,
                          cfg.plateau_patience, cfg.plateau_min_delta)
    scaler = ReturnScaler(N, cfg.gamma, device) if cfg.reward_scale else None
    ewc: EWCPenalty | None = None
    start_iter, global_step, elapsed_before = 0, 0, 0.0
    reward_version = env.reward_fn.version
    switches: list[RewardSwitch] = []

    # ---- resume
    ckpt_path = latest_checkpoint(cfg.checkpoint_dir) if resume_from == "auto" and cfg.checkpoint_dir else (
        Path(resume_from) if resume_from not in (None, "auto") else None)
    if ckpt_path is not None:
        ck = load_checkpoint(ckpt_path, device)
        policy.load_state_dict(ck["policy"])
        optimizer.load_state_dict(ck["optimizer"])
        torch.set_rng_state(ck["torch_rng"].cpu())
        gen.set_state(ck["generator"].cpu())  # generator states are CPU byte tensors, CUDA ones too
        env.load_state_dict(ck["env"])
        start_iter, global_step, elapsed_before = int(ck["iteration"]), int(ck["global_step"]), float(ck["elapsed_s"])
        stagnation.load_state_dict(ck["stagnation"])
        if "plateau" in ck:
            plateau.load_state_dict(ck["plateau"])
        if scaler is not None and "reward_scaler" in ck:
            scaler.load_state_dict(ck["reward_scaler"])
        if "ewc" in ck:
            ewc = EWCPenalty.from_state_dict(ck["ewc"], cfg.ewc_lambda)
        reward_version = str(ck["reward_fn_version"])
        log.info("resumed from %s at iteration %d (step %d)", ckpt_path, start_iter, global_step)

    tracker.log_params({**cfg.to_params(), "policy_parameters": policy.num_parameters(), "num_envs": N,
                        "batch_size": batch_size, "minibatch_size": minibatch_size,
                        "num_iterations": num_iterations, "reward_fn_version": env.reward_fn.version})

    # ---- rollout storage (on the env's device, reused every iteration)
    obs_buf = torch.zeros((T, N, D), device=device)
    final_obs_buf = torch.zeros((T, N, D), device=device)
    mask_buf = torch.zeros((T, N, A), dtype=torch.bool, device=device)
    act_buf = torch.zeros((T, N), dtype=torch.long, device=device)
    logp_buf = torch.zeros((T, N), device=device)
    rew_buf = torch.zeros((T, N), device=device)
    val_buf = torch.zeros((T, N), device=device)
    term_buf = torch.zeros((T, N), dtype=torch.bool, device=device)
    trunc_buf = torch.zeros((T, N), dtype=torch.bool, device=device)

    next_obs, next_mask = env.observe(), env.action_masks()
    history: list[dict[str, float]] = []
    last_ckpt: Path | None = ckpt_path
    stagnated = plateaued = False
    t_start = time.perf_counter()
    steps_at_start = global_step
    from tqdm.auto import tqdm
    bar = tqdm(total=num_iterations, initial=start_iter, disable=not cfg.progress, desc="ppo", unit="it")
    for iteration in range(start_iter + 1, num_iterations + 1):
        # ---- reward hot reload (between iterations only)
        if reward_source is not None:
            new_fn = reward_source(iteration)
            if new_fn is not None and new_fn.version != env.reward_fn.version:
                env.set_reward_fn(new_fn)
        if env.reward_fn.version != reward_version:
            switches.append(RewardSwitch(iteration, global_step, reward_version, env.reward_fn.version))
            log.warning("reward function switched at iteration %d: %s -> %s", iteration, reward_version[:12],
                        env.reward_fn.version[:12])
            tracker.log_params({f"reward_fn_switch_{iteration}": f"{reward_version} -> {env.reward_fn.version}"})
            reward_version = env.reward_fn.version

        frac = (iteration - 1.0) / num_iterations
        if cfg.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - frac) * cfg.learning_rate
        ent_coef = cfg.ent_coef if cfg.ent_coef_final is None else cfg.ent_coef + frac * (cfg.ent_coef_final -
                                                                                           cfg.ent_coef)

        # ---- rollout: T steps of all N envs, no host sync
        ep_ret = torch.zeros((), device=device)
        ep_len = torch.zeros((), device=device)
        ep_cnt = torch.zeros((), device=device)
        illegal = torch.zeros((), device=device)
        takeover = torch.zeros((), device=device)
        policy.eval()
        with torch.no_grad():
            for t in range(T):
                obs_buf[t], mask_buf[t] = next_obs, next_mask
                with record_function("rlops/policy_forward"):
                    logp_all, value = policy(next_obs, next_mask)
                    action = gumbel_sample(logp_all, gen)
                act_buf[t], val_buf[t] = action, value
                logp_buf[t] = logp_all.gather(1, action.unsqueeze(1)).squeeze(1)
                next_obs, reward, terminated, truncated, info = env.step(action)
                next_mask = env.action_masks()
                rew_buf[t] = reward if scaler is None else scaler(reward, terminated | truncated)
                term_buf[t], trunc_buf[t] = terminated, truncated
                final_obs_buf[t] = info.final_obs
                done = (terminated | truncated).float()
                ep_ret += (info.episode_return * done).sum()
                ep_len += (info.episode_length * done).sum()
                ep_cnt += done.sum()
                illegal += info.illegal.sum()
                takeover += (info.human_takeover & (terminated | truncated)).sum()
            global_step += batch_size

            # ---- bootstrap truncated episodes from V(final obs), then GAE
            final_values = torch.zeros((T, N), device=device)
            trunc_idx = trunc_buf.nonzero(as_tuple=True)  # one sync per iteration
            if trunc_idx[0].numel():
                final_values[trunc_idx] = policy.get_value(final_obs_buf[trunc_idx])
            next_value = policy.get_value(next_obs)
            with record_function("rlops/advantages"):
                advantages, returns = compute_gae(rew_buf, val_buf, next_value, term_buf, trunc_buf, final_values,
                                                  cfg.gamma, cfg.gae_lambda)

        # ---- flatten the batch (index = t * N + n)
        b_obs, b_masks = obs_buf.reshape(batch_size, D), mask_buf.reshape(batch_size, A)
        b_actions, b_logp = act_buf.reshape(-1), logp_buf.reshape(-1)
        b_advantages, b_returns, b_values = advantages.reshape(-1), returns.reshape(-1), val_buf.reshape(-1)
        b_done = (term_buf | trunc_buf).reshape(-1)
        if cfg.mode == "incremental" and cfg.ewc_lambda > 0 and ewc is None:
            # Fisher on the states the warm-started policy just visited, before any update.
            pick = torch.randperm(batch_size, generator=gen, device=device)[:cfg.ewc_samples]
            ewc = make_ewc(policy, b_obs[pick], b_masks[pick], cfg.ewc_lambda, gen)

        # ---- update: update_epochs passes over shuffled minibatches
        policy.train()
        stats: list[Tensor] = []
        epochs_run = 0
        for epoch in range(cfg.update_epochs):
            perm = torch.randperm(batch_size, generator=gen, device=device)
            for start in range(0, batch_size, minibatch_size):
                mb = perm[start:start + minibatch_size]
                with record_function("rlops/data_movement"):
                    mb_masks, mb_obs = b_masks[mb], b_obs[mb]
                with record_function("rlops/policy_forward"):
                    mb_logp_all, mb_values = policy(mb_obs, mb_masks)
                mb_new_logp = mb_logp_all.gather(1, b_actions[mb].unsqueeze(1)).squeeze(1)
                mb_entropy = masked_entropy(mb_logp_all, mb_masks).mean()
                pg_loss, v_loss, approx_kl, old_approx_kl, clipfrac = ppo_losses(
                    mb_new_logp, b_logp[mb], b_advantages[mb], mb_values, b_values[mb], b_returns[mb],
                    cfg.clip_coef, cfg.clip_vloss, cfg.norm_adv)
                loss = pg_loss - ent_coef * mb_entropy + cfg.vf_coef * v_loss
                ewc_term = ewc(policy) if ewc is not None else torch.zeros((), device=device)
                smooth = torch.zeros((), device=device)
                if cfg.smoothing_coef > 0:
                    nxt = mb + N  # the same env one step later, same episode unless step t ended it
                    valid = (nxt < batch_size) & ~b_done[mb]
                    nxt = torch.where(valid, nxt, mb)
                    nxt_logp, _ = policy(b_obs[nxt], b_masks[nxt])
                    smooth = smoothing_kl(mb_logp_all, mb_masks, nxt_logp, b_masks[nxt], valid)
                loss = loss + ewc_term + cfg.smoothing_coef * smooth
                optimizer.zero_grad(set_to_none=True)
                with record_function("rlops/backward"):
                    loss.backward()
                with record_function("rlops/optimizer"):
                    torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
                    optimizer.step()
                stats.append(torch.stack([pg_loss.detach(), v_loss.detach(), mb_entropy.detach(), approx_kl,
                                          old_approx_kl, clipfrac, ewc_term.detach(), smooth.detach()]))
            epochs_run = epoch + 1
            if cfg.target_kl is not None and float(approx_kl) > cfg.target_kl:
                break
        # The observation statistics move between iterations only, so one iteration's rollout and
        # update see the same normalisation.
        policy.update_obs_stats(b_obs)

        # ---- metrics (one host copy per iteration)
        with record_function("rlops/data_movement"):
            s = torch.stack(stats)
            means = s.mean(0).tolist()
            last_kl = s[-1, 3].item()
        n_eps = float(ep_cnt)
        ep_return = float(ep_ret / ep_cnt) if n_eps else float("nan")
        stagnated = stagnation.update(ep_return)
        elapsed = elapsed_before + time.perf_counter() - t_start
        metrics = {
            "episodic_return": ep_return, "episodic_length": float(ep_len / ep_cnt) if n_eps else float("nan"),
            "episodes": n_eps, "policy_loss": means[0], "value_loss": means[1], "entropy": means[2],
            "approx_kl": last_kl, "old_approx_kl": s[-1, 4].item(), "clipfrac": means[5],
            "explained_variance": explained_variance(b_values, b_returns), "ewc_penalty": means[6],
            "smoothing_kl": means[7], "learning_rate": optimizer.param_groups[0]["lr"],
            "illegal_actions": float(illegal), "human_takeover_rate": float(takeover) / n_eps if n_eps else 0.0,
            "sps": (global_step - steps_at_start) / max(time.perf_counter() - t_start, 1e-9),
            "stagnation": float(stagnated), "update_epochs_run": float(epochs_run), "iteration": float(iteration),
            "global_step": float(global_step), "elapsed_s": elapsed, "ent_coef": ent_coef,
            "reward_scale": float(scaler.rms.var.sqrt()) if scaler is not None else 1.0,
        }
        if plateau.due(iteration):
            metrics["eval_return"], plateaued = plateau.update(iteration, policy, env.reward_fn)
        history.append(metrics)

        # ---- checkpoint before reporting, so a kill after the report never loses the iteration
        if cfg.checkpoint_every and cfg.checkpoint_dir and (iteration % cfg.checkpoint_every == 0
                                                            or iteration == num_iterations):
            state: dict[str, Any] = {
                "iteration": iteration, "global_step": global_step, "elapsed_s": elapsed,
                "policy": policy.state_dict(), "policy_config": policy.config.to_dict(),
                "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                "generator": gen.get_state(), "env": env.state_dict(), "stagnation": stagnation.state_dict(),
                "reward_fn_version": reward_version, "config": cfg.to_params()}
            if ewc is not None:
                state["ewc"] = ewc.state_dict()
            state["plateau"] = plateau.state_dict()
            if scaler is not None:
                state["reward_scaler"] = scaler.state_dict()
            last_ckpt = save_checkpoint(cfg.checkpoint_dir, iteration, state, keep=cfg.keep_checkpoints)
        if stagnated and stagnation.since == stagnation.window:
            log.warning("stagnation: the episodic return has not improved for %d iterations (best %.4f)",
                        stagnation.window, stagnation.best)
        bar.set_postfix(ret=f"{ep_return:.3f}", kl=f"{last_kl:.4f}", refresh=False)
        bar.update(1)
        tracker.log_metrics(metrics, step=global_step)
        if on_iteration is not None and on_iteration(iteration, policy, metrics):
            policy.eval()
            break
        if plateaued:
            log.info("early stop at iteration %d: the evaluation return has not improved for %d evaluations "
                     "(best %.4f at iteration %d)", iteration, plateau.patience, plateau.best, plateau.best_iteration)
            break
    bar.close()
    if cfg.keep_best:
        plateau.restore_best(policy)

    wall = elapsed_before + time.perf_counter() - t_start
    final = history[-1]["episodic_return"] if history else float("nan")
    done_iters = int(history[-1]["iteration"]) if history else start_iter
    best = None if plateau.best_state is None else plateau.best
    return TrainResult(policy.eval(), done_iters, global_step, wall, final, stagnated, history, switches,
                       last_ckpt, reward_version, plateaued, best, plateau.best_iteration if best is not None else None)


__all__ = ["PPOConfig", "TrainResult", "RewardSwitch", "MetricsSink", "NullSink", "StagnationMonitor",
           "compute_gae", "ppo_losses", "explained_variance", "resolve_device", "train"]
