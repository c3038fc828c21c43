"""Hyperparameter search for a pack when the derived defaults are not enough (``rlops train tune``).

An Optuna study over a few PPO knobs around what the training step would use on this pack
(:func:`rlops.pipeline_steps.training.policy.ppo_config`: pack-derived values < ``ppo:`` < ``train:``):
learning rate, entropy weight, clip range, γ, env count and rollout length. The objective is the
mean greedy return on held-out seeded episodes (:func:`rlops.sandbox.policies.evaluate_policy`), the
same figure the training step reports. Trial 0 is the defaults themselves, exactly as the training
step would run them (outside the search space too), and every trial is scored on the same held-out
episodes, so the best config is at least as good as the defaults by construction and the gap is
reported. Weak trials are pruned from their training return at equal environment steps (median
rule); that only stops them early — trials are compared on the held-out return. Every trial is an
MLflow run nested under one tuning run. ``write=True`` merges the best knobs into the pack's ``params.yaml``
(PPO settings into ``ppo:``, the env count into ``train:``), keeping its other lines and comments.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.model.device import resolve_device
from rlops.model.ppo import train
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.training.policy import ppo_config
from rlops.pipeline_steps.training.request import TuneRequest
from rlops.registry import tags as T
from rlops.sandbox.policies import evaluate_policy
from rlops.sandbox.profiles import default_profile

if TYPE_CHECKING:
    import optuna

    from rlops.common.params_training import PpoParams, TrainParams

log = logging.getLogger(__name__)

KNOBS = ("learning_rate", "ent_coef", "clip_coef", "gamma", "num_envs", "num_steps")
"""What the search moves; every other PPO setting stays the step's."""
MINIBATCH = 2_048


@dataclass
class TuneResult:
    """The outcome of a study: the defaults' score, the best trial, every trial, the written file."""

    scenario: str
    default_params: dict[str, Any]
    default_value: float
    best_params: dict[str, Any]
    best_value: float
    trials: list[dict[str, Any]] = field(default_factory=list)
    parent_run_id: str | None = None
    written: str | None = None
    wall_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class TrialSetting:
    """What every trial of one study shares: the pack, its reward and profile, the budgets, the
    training blocks the knobs are laid over."""

    pack: Any
    """The scenario pack, compiled once for the study."""
    reward_fn: str
    """The label of the reward function trials train and are scored on."""
    profile: str | None
    """The sandbox profile trials train and are scored in."""
    timesteps: int
    """Environment steps per trial (at least one batch)."""
    eval_episodes: int
    """Held-out episodes each trained policy is scored on."""
    eval_seed: int
    """Seed of the held-out episodes: the same for every trial."""
    device: str | None
    """cpu, cuda or auto (None: params ppo.device)."""
    train: TrainParams
    """The params' ``train:`` block."""
    ppo: PpoParams
    """The params' ``ppo:`` block."""


def defaults_of(train: TrainParams, ppo: PpoParams, pack: Any, timesteps: int, device: str | None) -> dict[str, Any]:
    """The tuned knobs as the training step would set them on this pack."""
    plan = ppo_config(train, ppo, pack, "full", timesteps, None, device=device)
    cfg = plan.config
    return {
        "learning_rate": cfg.learning_rate,
        "ent_coef": cfg.ent_coef,
        "clip_coef": cfg.clip_coef,
        "gamma": cfg.gamma,
        "num_envs": plan.num_envs,
        "num_steps": cfg.num_steps,
    }


def suggest(trial: optuna.Trial, base: dict[str, Any]) -> dict[str, Any]:
    """One point of the search space: a factor of 4 (10 for the entropy weight) around the
    defaults, half / same / double env count and rollout length, γ from a short list."""
    lr, ent = float(base["learning_rate"]), max(float(base["ent_coef"]), 1e-4)
    gammas = sorted({0.95, 0.99, 0.995, 0.999, float(base["gamma"])})
    envs = sorted({max(16, int(base["num_envs"]) // 2), int(base["num_envs"]), int(base["num_envs"]) * 2})
    steps = sorted({max(4, int(base["num_steps"]) // 2), int(base["num_steps"]), int(base["num_steps"]) * 2})
    return {
        "learning_rate": trial.suggest_float("learning_rate", lr / 4, lr * 4, log=True),
        "ent_coef": trial.suggest_float("ent_coef", ent / 10, ent * 10, log=True),
        "clip_coef": trial.suggest_float("clip_coef", 0.1, 0.3),
        "gamma": trial.suggest_categorical("gamma", gammas),
        "num_envs": trial.suggest_categorical("num_envs", envs),
        "num_steps": trial.suggest_categorical("num_steps", steps),
    }


class _TrialSink:
    """Forwards PPO's metrics to the trial's MLflow run and its training return to Optuna.

    Optuna's pruner compares trials at the same reported step; a trial reports after every
    ``step_unit`` environment steps (the defaults' batch), not every iteration, so trials with
    smaller batches are not judged on fewer samples than the others."""

    def __init__(self, run: Any, trial: optuna.Trial, step_unit: int) -> None:
        self.run, self.trial, self.pruned = run, trial, False
        self.step_unit, self.reported = max(int(step_unit), 1), -1

    def log_metrics(self, metrics: Any, step: int) -> None:
        self.run.log_metrics(metrics, step=step)

    def log_params(self, params: Any) -> None:
        self.run.log_params(params)

    def on_iteration(self, iteration: int, policy: Any, metrics: dict[str, float]) -> bool:
        value = metrics.get("episodic_return", float("nan"))
        step = int(metrics.get("global_step", 0)) // self.step_unit
        if not math.isnan(value) and step > self.reported:
            self.trial.report(float(value), step=step)
            self.reported = step
            self.pruned = self.trial.should_prune()
        return self.pruned


def tune(ctx: StepContext, request: TuneRequest | None = None) -> TuneResult:
    """Run the study ``request`` asks for (at most ``trials`` trials, starting none after
    ``budget_s`` seconds)."""
    import optuna

    request = request or TuneRequest()
    trials, budget_s, timesteps = request.trials, request.budget_s, request.timesteps
    eval_episodes, eval_seed, device = request.eval_episodes, request.eval_seed, request.device
    t0 = time.perf_counter()
    pack = ctx.load_pack()
    label = ctx.reward_choice(request.reward_fn, pack).reward_fn
    profile = default_profile(pack, "sandbox", ctx.config.train.profile)
    base = defaults_of(ctx.config.train, ctx.config.ppo, pack, timesteps, device)
    setting = TrialSetting(
        pack, label, profile, timesteps, eval_episodes, eval_seed, device, ctx.config.train, ctx.config.ppo
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=request.seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=2),
    )
    rows: list[dict[str, Any]] = []
    step_unit = int(base["num_envs"]) * int(base["num_steps"])
    with ctx.tracker.start_run(
        f"tune-{ctx.scenario}", tags={T.STEP: T.TUNE, "reward_fn": label, "profile": str(profile)}
    ) as parent:
        parent.log_params(
            {
                "trials": trials,
                "budget_s": budget_s,
                "timesteps_per_trial": timesteps,
                "eval_episodes": eval_episodes,
                "eval_seed": eval_seed,
                **{f"default_{k}": v for k, v in base.items()},
            }
        )

        def objective(trial: optuna.Trial) -> float:
            # Trial 0 runs the defaults as they are, not as a point of the search space (a default
            # such as ent_coef 0 may lie outside it); the pruner never stops it (nothing to compare).
            defaults = trial.number == 0
            knobs = dict(base) if defaults else suggest(trial, base)
            trial.set_user_attr("knobs", knobs)
            value, run_id, pruned = _run_trial(ctx, setting, trial, knobs, parent.run_id, defaults, step_unit)
            rows.append(
                {
                    "number": trial.number,
                    "run_id": run_id,
                    "value": value,
                    "pruned": pruned,
                    "defaults": defaults,
                    **knobs,
                }
            )
            if pruned:
                raise optuna.TrialPruned()
            return value

        study.optimize(objective, n_trials=trials, timeout=budget_s, catch=())
        done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        default_value = float(study.trials[0].value) if study.trials[0].value is not None else float("nan")
        best = study.best_trial if done else study.trials[0]
        assert best.value is not None, "the default trial (the first) always completes"
        best_params = {k: best.user_attrs["knobs"][k] for k in KNOBS}
        result = TuneResult(ctx.scenario, base, default_value, best_params, float(best.value), rows, parent.run_id)
        parent.log_metrics(
            {
                "default_value": default_value,
                "best_value": result.best_value,
                "trials_complete": float(len(done)),
                "trials_pruned": float(len(rows) - len(done)),
            },
            step=0,
        )
        parent.log_dict(result.to_dict(), "tune/result.json")
        if request.write and not ctx.dry_run:
            result.written = str(write_params(ctx.pack_dir / "params.yaml", best_params))
            parent.set_tags({"written": result.written})
    result.wall_s = round(time.perf_counter() - t0, 1)
    return result


def _run_trial(
    services: StepServices,
    setting: TrialSetting,
    trial: optuna.Trial,
    knobs: dict[str, Any],
    parent_id: str,
    defaults: bool = False,
    step_unit: int = 1,
) -> tuple[float, str, bool]:
    pack, label, profile = setting.pack, setting.reward_fn, setting.profile

    batch = int(knobs["num_envs"]) * int(knobs["num_steps"])
    # Another batch size keeps minibatches near MINIBATCH transitions; the defaults keep their own.
    minibatches = {} if defaults else {"num_minibatches": max(4, batch // MINIBATCH)}
    plan = ppo_config(
        setting.train,
        setting.ppo,
        pack,
        "full",
        max(setting.timesteps, batch),
        None,
        device=setting.device,
        progress=False,
        **minibatches,
        **knobs,
    )
    cfg = plan.config
    env = pack.make_env(
        plan.num_envs, reward_fn=label, profile=profile, device=resolve_device(cfg.device).type, seed=cfg.seed
    )
    tags = {T.STEP: T.TUNE_TRIAL, "trial": trial.number, "reward_fn": label, "defaults": str(defaults).lower()}
    name = f"tune-{services.scenario}-trial-{trial.number}"
    with services.tracker.start_run(name, tags=tags, parent_run_id=parent_id) as run:
        sink = _TrialSink(run, trial, step_unit)
        res = train(cfg, env, tracker=sink, on_iteration=sink.on_iteration)
        if sink.pruned:
            run.set_tags({"optuna_state": "pruned"})
            return float("nan"), run.run_id, True
        cpu = res.policy.to("cpu").eval()
        ev = evaluate_policy(
            pack,
            lambda e: cpu.act(e.observe(), deterministic=True).action,
            episodes=setting.eval_episodes,
            seed=setting.eval_seed,
            reward_fn=label,
            profile=profile,
        )
        value = float(ev.mean_return)
        run.log_metrics({"objective": value}, step=res.global_step)
        run.set_tags({"optuna_state": "complete"})
        return value, run.run_id, False


# --------------------------------------------------------------------------- --write
_TOP = re.compile(r"^([A-Za-z_][\w-]*):")


def write_params(path: Path, best: dict[str, Any]) -> Path:
    """Merge ``best`` into the pack's params file: PPO knobs into ``ppo:``, ``num_envs`` into
    ``train:``. An existing ``  key: value  # comment`` line keeps its comment; missing keys are
    appended to their block, a missing block to the file. The result is re-read to check it."""
    import yaml

    text = path.read_text() if path.exists() else ""
    blocks = {
        "ppo": {k: v for k, v in best.items() if k != "num_envs"},
        "train": {k: v for k, v in best.items() if k == "num_envs"},
    }
    for block, values in blocks.items():
        if values:
            text = _set_block(text, block, values)
    loaded = yaml.safe_load(text) or {}
    for block, values in blocks.items():
        got = {k: (loaded.get(block) or {}).get(k) for k in values}
        if got != {k: _plain(v) for k, v in values.items()}:
            raise RuntimeError(f"{path}: the rewritten {block}: block reads back as {got}, not {values}")
    path.write_text(text)
    return path


def _plain(v: Any) -> Any:
    """The value written: floats to 6 significant digits (never to 6 decimals: a learning rate of
    1e-7 stays 1e-7); a NaN or infinity is never a tuned knob."""
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"a tuned value is {v}; expected a finite number")
        return float(f"{v:.6g}")
    return v


def _text(v: Any) -> str:
    """YAML text of a written value that YAML reads back as the same value (``1e-07`` would read
    back as a string: YAML 1.1 floats need a dot in the mantissa)."""
    v = _plain(v)
    if isinstance(v, float):
        text = repr(v)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exp = text.split("e")
            text = f"{mantissa}.0e{exp}"
        return text
    return str(v)


def _set_block(text: str, block: str, values: dict[str, Any]) -> str:
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"{block}:")), None)
    if start is None:
        head = [f"{block}:  # tuned by `rlops train tune`"]
        return "\n".join([*lines, *head, *(f"  {k}: {_text(v)}" for k, v in values.items())]) + "\n"
    end = next((i for i in range(start + 1, len(lines)) if _TOP.match(lines[i])), len(lines))
    body, todo = lines[start + 1 : end], dict(values)
    for i, ln in enumerate(body):
        m = re.match(r"^(\s+)([\w-]+):\s*([^#]*?)(\s*#.*)?$", ln)
        if m and m.group(2) in todo:
            body[i] = f"{m.group(1)}{m.group(2)}: {_text(todo.pop(m.group(2)))}{m.group(4) or ''}"
    blank = 0
    while body and not body[-1].strip():
        body.pop()
        blank += 1
    body += [f"  {k}: {_text(v)}" for k, v in todo.items()] + [""] * blank
    return "\n".join([*lines[: start + 1], *body, *lines[end:]]) + "\n"


__all__ = ["KNOBS", "TuneResult", "defaults_of", "suggest", "tune", "write_params"]
