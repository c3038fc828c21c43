"""Hyperparameters and run settings of :func:`rlops.model.ppo.train`.

Pure configuration (no torch import), so the params model (:mod:`rlops.common.params_training`)
reads it in the base layer; the device it names is resolved by :func:`rlops.model.device.resolve_device`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass
class PPOConfig:
    """Masked PPO settings. The defaults are the same for every pack; what depends on a pack (env
    count, rollout length, minibatches, γ) is derived from its horizon and action count by
    :func:`rlops.model.pack_defaults.derive_defaults`. The ``ppo:`` block of params.yaml is generated
    from these fields (:mod:`rlops.common.params_training`), so each default and description lives here only."""

    # ---- budget and rollout
    total_timesteps: int = 1_000_000
    """Environment steps to train for, all envs together (rounded down to whole iterations)."""
    num_steps: int = 8
    """Rollout length per env and iteration; a batch is ``num_envs × num_steps`` transitions."""
    # ---- optimisation
    learning_rate: float = 2.5e-3
    """Adam step size (the start value when ``anneal_lr``)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """λ of generalised advantage estimation."""
    num_minibatches: int = 8
    """Minibatches per epoch (minibatch size = batch size / this)."""
    update_epochs: int = 4
    """Passes over each batch."""
    norm_adv: bool = True
    """Normalise advantages per minibatch."""
    clip_coef: float = 0.2
    """PPO clip range ε for the probability ratio (and for the value when ``clip_vloss``)."""
    clip_vloss: bool = True
    """Clip the value update around the rollout's value estimates."""
    ent_coef: float = 0.01
    """Weight of the entropy bonus (entropy over legal actions only); the start value of the schedule."""
    ent_coef_final: float | None = 0.0
    """Entropy weight reached at the end of the run, linearly from ``ent_coef`` (None: constant)."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    target_kl: float | None = None
    """Stop an iteration's epochs early once the approximate KL exceeds this (None: never)."""
    # ---- normalisation
    obs_norm: bool = True
    """Standardise the state features (already scaled to the pack's declared ranges by the sandbox)
    with running statistics kept in the policy, so serving normalises identically."""
    obs_clip: float = 5.0
    """Bound on a standardised feature."""
    reward_scale: bool = True
    """Divide rewards by the running std of the discounted return (value targets of unit scale)."""
    # ---- network
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer widths of the actor and of the critic."""
    embed_dim: int = 16
    """Width of the action-history embedding / attention summary."""
    activation: str = "tanh"
    """Hidden activation: ``tanh`` or ``relu``."""
    # ---- run
    seed: int = 7
    """Seeds Python, NumPy, torch and the action-sampling generator."""
    device: str = "auto"
    """``cpu``, ``cuda`` or ``auto`` (CUDA when present); the environment must live on the same device."""
    torch_threads: int | None = None
    """Torch threads for the run, intra-op and (where still allowed) inter-op (None: leave as is);
    the training step sets it from ``train.threads``."""
    progress: bool = False
    """Show a tqdm progress bar."""
    checkpoint_every: int = 0
    """Write a checkpoint every N iterations and after the last one (0: never)."""
    checkpoint_dir: str | None = None
    """Folder for ``ckpt_<iteration>.pt`` files."""
    keep_checkpoints: int = 2
    """How many of the newest checkpoints to keep (0: all)."""
    stagnation_window: int = 10
    """Iterations without improvement of the best episodic return that raise the stagnation flag."""
    stagnation_tol: float = 0.01
    """Improvement (relative to ``max(1, |best|)``) that counts as the return having moved."""
    # ---- early stopping on the evaluation return
    plateau_eval_every: int = 4
    """Iterations between greedy evaluations on a fixed seeded batch (0: never evaluate or stop early)."""
    plateau_eval_episodes: int = 2048
    """Episodes in that batch."""
    plateau_eval_seed: int = 9_000_000
    """First instance seed of that batch (disjoint from training and held-out evaluation seeds)."""
    plateau_patience: int = 8
    """Evaluations in a row without improvement that stop the run (0: evaluate but never stop)."""
    plateau_min_delta: float = 0.002
    """Improvement of the evaluation return, relative to ``max(1, |best|)``, that counts as progress."""
    keep_best: bool = True
    """Hand back the weights with the best evaluation return rather than the last ones."""
    # ---- incremental training and regularisers
    mode: str = "full"
    """``full``: train from scratch; ``incremental``: warm-start from ``init_from``."""
    ewc_lambda: float = 0.0
    """Strength of the EWC penalty in incremental mode (0: off)."""
    ewc_samples: int = 2048
    """States (from the first rollout of the warm-started policy) used to estimate the Fisher."""
    smoothing_coef: float = 0.0
    """Weight of the KL penalty between consecutive steps' action distributions (0: off)."""

    def __post_init__(self) -> None:
        self.hidden_sizes = tuple(int(h) for h in self.hidden_sizes)
        problems = []
        if self.mode not in ("full", "incremental"):
            problems.append(f"mode must be 'full' or 'incremental', got '{self.mode}'")
        if self.device not in ("cpu", "cuda", "auto") and not str(self.device).startswith("cuda:"):
            problems.append(f"device must be 'cpu', 'cuda' or 'auto', got '{self.device}'")
        for name in ("total_timesteps", "num_steps", "num_minibatches", "update_epochs", "plateau_eval_episodes"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.gamma <= 1 or not 0 <= self.gae_lambda <= 1:
            problems.append(f"gamma must be in (0, 1] and gae_lambda in [0, 1], got {self.gamma}, {self.gae_lambda}")
        if self.plateau_eval_every < 0 or self.plateau_patience < 0 or self.obs_clip <= 0:
            problems.append("plateau_eval_every and plateau_patience must be >= 0 and obs_clip > 0")
        if self.checkpoint_every and not self.checkpoint_dir:
            problems.append("checkpoint_every is set but checkpoint_dir is not")
        if problems:
            raise ValueError("invalid PPOConfig: " + "; ".join(problems))

    @classmethod
    def from_params(cls, params: dict[str, Any] | None = None, **overrides: Any) -> PPOConfig:
        """Build from a mapping of PPOConfig fields (the resolved ``ppo:`` block of params, see
        :func:`rlops.pipeline_steps.training.policy.ppo_config`) plus keyword overrides."""
        merged = {**(params or {}), **overrides}
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise ValueError(f"unknown PPO settings {unknown}; expected a subset of {sorted(known)}")
        return cls(**merged)

    def to_params(self) -> dict[str, Any]:
        """Flat primitives for tracking and checkpoints."""
        d = asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d


__all__ = ["PPOConfig"]
