"""The side concerns of :func:`rlops.model.ppo.train`, one call each, so the loop there reads as the
algorithm: resuming from and saving a checkpoint, reward hot reload between
iterations, the EWC and action-smoothing penalties, and the metrics of one iteration.

Every helper does exactly what the loop did inline (same tensor ops, same generator draws, in the
same order), so a resumed run stays bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rlops.common.metrics_sink import MetricsSink
from rlops.common.ppo_config import PPOConfig
from rlops.model.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from rlops.model.device import resolve_device
from rlops.model.early_stop import EvalPlateau, StagnationMonitor
from rlops.model.ewc import EWCPenalty, make_ewc, smoothing_kl
from rlops.model.normalize import ReturnScaler
from rlops.model.policy import PolicyNetwork
from rlops.model.rollout import RolloutBatch

log = logging.getLogger("rlops.model.ppo")  # the loop's own logger: messages read as PPO's


@dataclass
class RewardSwitch:
    """A reward function change picked up between two iterations."""

    iteration: int
    global_step: int
    old_version: str
    new_version: str


def check_device(cfg: PPOConfig, env: Any) -> torch.device:
    """The device ``cfg.device`` resolves to, which must be the environment's."""
    device = resolve_device(cfg.device)
    if env.device.type != device.type:
        raise ValueError(
            f"the environment is on {env.device} but PPOConfig.device resolves to {device}; "
            f"create it with pack.make_env(..., device='{device.type}') so no step crosses devices"
        )
    return device


def log_run_params(
    tracker: MetricsSink,
    cfg: PPOConfig,
    policy: PolicyNetwork,
    env: Any,
    batch_size: int,
    minibatch_size: int,
    num_iterations: int,
) -> None:
    tracker.log_params(
        {
            **cfg.to_params(),
            "policy_parameters": policy.num_parameters(),
            "num_envs": env.num_envs,
            "batch_size": batch_size,
            "minibatch_size": minibatch_size,
            "num_iterations": num_iterations,
            "reward_fn_version": env.reward_fn.version,
        }
    )


def anneal(cfg: PPOConfig, optimizer: torch.optim.Optimizer, iteration: int, num_iterations: int) -> float:
    """Set this iteration's learning rate (linear decay when ``anneal_lr``) and return its entropy
    coefficient (linear from ``ent_coef`` to ``ent_coef_final`` when that is set)."""
    frac = (iteration - 1.0) / num_iterations
    if cfg.anneal_lr:
        optimizer.param_groups[0]["lr"] = (1.0 - frac) * cfg.learning_rate
    return cfg.ent_coef if cfg.ent_coef_final is None else cfg.ent_coef + frac * (cfg.ent_coef_final - cfg.ent_coef)


def checkpoint_to_resume(cfg: PPOConfig, resume_from: str | Path | None) -> Path | None:
    """The checkpoint file ``resume_from`` names (``"auto"``: the newest in ``cfg.checkpoint_dir``)."""
    if resume_from == "auto":
        return latest_checkpoint(cfg.checkpoint_dir) if cfg.checkpoint_dir else None
    return Path(resume_from) if resume_from is not None else None


def resume(
    ckpt_path: Path,
    cfg: PPOConfig,
    device: torch.device,
    policy: PolicyNetwork,
    optimizer: torch.optim.Optimizer,
    gen: torch.Generator,
    env: Any,
    stagnation: StagnationMonitor,
    plateau: EvalPlateau,
    scaler: ReturnScaler | None,
) -> tuple[int, int, float, EWCPenalty | None, str]:
    """Load every piece of training state from ``ckpt_path`` in place; returns
    ``(iteration, global_step, elapsed_s, ewc, reward_fn_version)`` of the checkpoint."""
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
    ewc = EWCPenalty.from_state_dict(ck["ewc"], cfg.ewc_lambda) if "ewc" in ck else None
    log.info("resumed from %s at iteration %d (step %d)", ckpt_path, start_iter, global_step)
    return start_iter, global_step, elapsed_before, ewc, str(ck["reward_fn_version"])


def checkpoint_due(cfg: PPOConfig, iteration: int, num_iterations: int) -> bool:
    """Every ``checkpoint_every`` iterations, and after the last one (when checkpoints are on)."""
    return bool(
        cfg.checkpoint_every
        and cfg.checkpoint_dir
        and (iteration % cfg.checkpoint_every == 0 or iteration == num_iterations)
    )


def save_state(
    cfg: PPOConfig,
    iteration: int,
    global_step: int,
    elapsed: float,
    policy: PolicyNetwork,
    optimizer: torch.optim.Optimizer,
    gen: torch.Generator,
    env: Any,
    stagnation: StagnationMonitor,
    plateau: EvalPlateau,
    scaler: ReturnScaler | None,
    ewc: EWCPenalty | None,
    reward_fn_sha256: str,
) -> Path:
    """Checkpoint everything :func:`resume` needs to continue bit-identically."""
    assert cfg.checkpoint_dir is not None, "save_state runs only when checkpoint_due (checkpoints on)"
    state: dict[str, Any] = {
        "iteration": iteration,
        "global_step": global_step,
        "elapsed_s": elapsed,
        "policy": policy.state_dict(),
        "policy_config": policy.config.to_dict(),
        "optimizer": optimizer.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "generator": gen.get_state(),
        "env": env.state_dict(),
        "stagnation": stagnation.state_dict(),
        "reward_fn_version": reward_fn_sha256,
        "config": cfg.to_params(),
    }
    if ewc is not None:
        state["ewc"] = ewc.state_dict()
    state["plateau"] = plateau.state_dict()
    if scaler is not None:
        state["reward_scaler"] = scaler.state_dict()
    return save_checkpoint(cfg.checkpoint_dir, iteration, state, keep=cfg.keep_checkpoints)


def hot_reload(
    iteration: int,
    global_step: int,
    env: Any,
    reward_source: Callable[[int], Any] | None,
    reward_fn_sha256: str,
    switches: list[RewardSwitch],
    tracker: MetricsSink,
) -> str:
    """Swap in the reward function ``reward_source`` hands out for ``iteration`` and record any
    change (also one made to ``env`` from outside); returns the version now in force."""
    if reward_source is not None:
        new_fn = reward_source(iteration)
        if new_fn is not None and new_fn.version != env.reward_fn.version:
            env.set_reward_fn(new_fn)
    if env.reward_fn.version != reward_fn_sha256:
        switches.append(RewardSwitch(iteration, global_step, reward_fn_sha256, env.reward_fn.version))
        log.warning(
            "reward function switched at iteration %d: %s -> %s",
            iteration,
            reward_fn_sha256[:12],
            env.reward_fn.version[:12],
        )
        tracker.log_params({f"reward_fn_switch_{iteration}": f"{reward_fn_sha256} -> {env.reward_fn.version}"})
        reward_fn_sha256 = env.reward_fn.version
    return reward_fn_sha256


def ewc_if_due(
    cfg: PPOConfig,
    ewc: EWCPenalty | None,
    policy: PolicyNetwork,
    batch: RolloutBatch,
    gen: torch.Generator,
    device: torch.device,
) -> EWCPenalty | None:
    """The EWC penalty of an incremental run, built once from the first rollout's ``batch``."""
    if cfg.mode == "incremental" and cfg.ewc_lambda > 0 and ewc is None:
        # Fisher on the states the warm-started policy just visited, before any update.
        pick = torch.randperm(batch.obs.shape[0], generator=gen, device=device)[: cfg.ewc_samples]
        ewc = make_ewc(policy, batch.obs[pick], batch.masks[pick], cfg.ewc_lambda, gen)
    return ewc


def smoothing_term(
    cfg: PPOConfig,
    policy: PolicyNetwork,
    mb: Tensor,
    mb_logp_all: Tensor,
    mb_masks: Tensor,
    batch: RolloutBatch,
    N: int,
    device: torch.device,
) -> Tensor:
    """KL between the policy at step t and t+1 of the same episode (0 when smoothing is off);
    ``mb`` are the minibatch's rows of ``batch``."""
    if cfg.smoothing_coef <= 0:
        return torch.zeros((), device=device)
    nxt = mb + N  # the same env one step later, same episode unless step t ended it
    valid = (nxt < batch.obs.shape[0]) & ~batch.done[mb]
    nxt = torch.where(valid, nxt, mb)
    nxt_logp, _ = policy(batch.obs[nxt], batch.masks[nxt])
    return smoothing_kl(mb_logp_all, mb_masks, nxt_logp, batch.masks[nxt], valid)


def iteration_metrics(
    stats: list[Tensor],
    episodes: tuple[Tensor, Tensor, Tensor, Tensor, Tensor],
    explained_var: float,
    stagnation: StagnationMonitor,
    optimizer: torch.optim.Optimizer,
    scaler: ReturnScaler | None,
    **counters: float,
) -> dict[str, float]:
    """The metrics of one iteration (one host copy). ``episodes`` = summed ``(return, length,
    count, illegal actions, human takeovers)`` of the episodes that ended in the rollout;
    ``counters``: ``sps``, ``epochs_run``, ``iteration``, ``global_step``, ``elapsed_s``, ``ent_coef``.
    Updates ``stagnation`` with the episodic return."""
    ep_ret, ep_len, ep_cnt, illegal, takeover = episodes
    with torch.profiler.record_function("rlops/data_movement"):  # the iteration's one host sync
        s = torch.stack(stats)
        means = s.mean(0).tolist()
    n_eps = float(ep_cnt)
    ep_return = float(ep_ret / ep_cnt) if n_eps else float("nan")
    stagnated = stagnation.update(ep_return)
    return {
        "episodic_return": ep_return,
        "episodic_length": float(ep_len / ep_cnt) if n_eps else float("nan"),
        "episodes": n_eps,
        "policy_loss": means[0],
        "value_loss": means[1],
        "entropy": means[2],
        "approx_kl": s[-1, 3].item(),
        "old_approx_kl": s[-1, 4].item(),
        "clipfrac": means[5],
        "explained_variance": explained_var,
        "ewc_penalty": means[6],
        "smoothing_kl": means[7],
        "learning_rate": optimizer.param_groups[0]["lr"],
        "illegal_actions": float(illegal),
        "human_takeover_rate": float(takeover) / n_eps if n_eps else 0.0,
        "sps": counters["sps"],
        "stagnation": float(stagnated),
        "update_epochs_run": float(counters["epochs_run"]),
        "iteration": float(counters["iteration"]),
        "global_step": float(counters["global_step"]),
        "elapsed_s": counters["elapsed_s"],
        "ent_coef": counters["ent_coef"],
        "reward_scale": float(scaler.rms.var.sqrt()) if scaler is not None else 1.0,
    }


def report_iteration(
    metrics: dict[str, float], stagnation: StagnationMonitor, bar: Any, tracker: MetricsSink, global_step: int
) -> None:
    """Say once when the return stagnates, move the progress bar, log the iteration's metrics."""
    if metrics["stagnation"] and stagnation.since == stagnation.window:
        # routine once training has converged: information, not a warning (the metric says it too)
        log.info(
            "stagnation: the episodic return has not improved for %d iterations (best %.4f)",
            stagnation.window,
            stagnation.best,
        )
    bar.set_postfix(ret=f"{metrics['episodic_return']:.3f}", kl=f"{metrics['approx_kl']:.4f}", refresh=False)
    bar.update(1)
    tracker.log_metrics(metrics, step=global_step)
