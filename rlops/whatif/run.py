"""``reward_whatif``: train a policy under a changed reward and compare it with the champion.

1. The change (``--set``/``--param``) is checked against the reward in force (the pack's reward
   choice) before anything runs; the changed module is that reward's source with the new literals.
2. A policy is trained in process under the changed reward with the pack's default settings
   (:func:`rlops.model.pack_defaults.derive_defaults`, early stopping on a plateau): the training
   every pack learns with, in seconds on a CPU.
3. It plays the evaluation's seeded held-out episodes (``evaluate.episodes``/``evaluate.seed``) of
   the calibrated sandbox — the pack's default world before a first calibration — side by side
   with the registry's champion; without a champion (or one of another observation layout), with
   a policy trained the same way under the current reward. Both are scored under the current and
   the changed reward, on every KPI, overall and per segment, with confidence intervals
   (:mod:`rlops.whatif.compare`), and the decision maps are compared
   (:mod:`rlops.whatif.decision_map`).
4. With ``save``, the changed module becomes the pack's next ``reward_vN.py`` (:mod:`rlops.whatif.save`).

Nothing is written to the registry or the trace store.
"""

from __future__ import annotations

import logging
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlops.common.arguments import MAX_EPISODES, count
from rlops.common.policy_ref import policy_model_name
from rlops.common.progress import progress_bar
from rlops.common.threads import set_torch_threads
from rlops.model.pack_defaults import derive_defaults
from rlops.model.policy import PolicyNetwork
from rlops.model.policy_io import load_policy, save_policy
from rlops.model.ppo import train
from rlops.pipeline_steps.infra.policy_loader import load_policy_ref
from rlops.pipeline_steps.promotion.evaluate_sandbox import segment_masks
from rlops.registry.client import CHAMPION
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.kpis import compile_kpis
from rlops.sandbox.pack import Pack
from rlops.sandbox.profiles import CALIBRATED, default_profile
from rlops.sandbox.reward import RewardFunction
from rlops.whatif.change import RewardChange, changed_reward_fn, resolve_change
from rlops.whatif.compare import compare
from rlops.whatif.decision_map import decision_map_change
from rlops.whatif.direction import weight_direction
from rlops.whatif.episodes import play
from rlops.whatif.save import save_reward_module

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.services import StepServices

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WhatIfSettings:
    """How a what-if trains and evaluates (defaults: the pack's training defaults, the evaluation's episodes)."""

    episodes: int | None = None
    """Held-out episodes (None: ``evaluate.episodes``)."""
    seed: int = 7
    """Training seed of the what-if policy (and of the baseline policy when there is no champion)."""
    timesteps: int | None = None
    """Training budget in environment steps (None: the PPO default, with early stopping)."""
    threads: int = 1
    """Torch threads: one is the most CPU-efficient for these small networks."""
    plateau_eval_every: int = 2
    """Iterations between the early-stopping evaluations: an answer is wanted while the expert waits,
    so a what-if stops sooner than a production training (every 4, patience 8)."""
    plateau_patience: int = 4
    """Evaluations without improvement that stop the training."""
    plateau_min_delta: float = 0.005
    """Relative improvement of the evaluation return that counts as progress."""
    plateau_eval_episodes: int = 1024
    """Episodes of each early-stopping evaluation."""
    clusters: int | None = None
    """Decision-map clusters (None: ``audit.clusters``, as the console's map)."""
    confidence: float = 0.95
    """Level of the intervals."""


def next_label(pack: Pack) -> str:
    """``vN`` one above the highest reward version of the pack."""
    numbers = [int(d) for d in (re.sub(r"\D", "", k) for k in pack.reward_fns) if d]
    return f"v{max(numbers, default=0) + 1}"


def _greedy(policy: PolicyNetwork) -> Callable[[torch.Tensor], torch.Tensor]:
    def decide(obs: torch.Tensor) -> torch.Tensor:
        return policy.act(obs, deterministic=True).action

    return decide


def train_under(
    pack: Pack, fn: RewardFunction, profile: str, settings: WhatIfSettings, on_iteration: Callable[[], None]
) -> tuple[PolicyNetwork, dict[str, Any]]:
    """A policy trained in process under ``fn`` with the pack's default settings."""
    plan = derive_defaults(pack, device="cpu", **_overrides(settings))
    env = BatchedEnv(pack.scenario, fn, num_envs=plan.num_envs, profile=profile)
    env.reset(settings.seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = train(plan.config, env, on_iteration=lambda *_: on_iteration())
    return result.policy.eval(), {
        "steps": result.global_step,
        "iterations": result.iterations,
        "stopped_early": result.stopped_early,
        "wall_s": round(time.perf_counter() - t0, 2),
        "cpu_s": round(time.process_time() - cpu0, 2),
    }


def _overrides(settings: WhatIfSettings) -> dict[str, Any]:
    out: dict[str, Any] = {
        "seed": settings.seed,
        "torch_threads": settings.threads,
        "plateau_eval_every": settings.plateau_eval_every,
        "plateau_patience": settings.plateau_patience,
        "plateau_min_delta": settings.plateau_min_delta,
        "plateau_eval_episodes": settings.plateau_eval_episodes,
    }
    if settings.timesteps is not None:
        out["total_timesteps"] = settings.timesteps
    return out


def _iterations(pack: Pack, settings: WhatIfSettings) -> int:
    plan = derive_defaults(pack, device="cpu", **_overrides(settings))
    return max(plan.config.total_timesteps // (plan.num_envs * plan.config.num_steps), 1)


def baseline_policy(
    ctx: StepServices,
    pack: Pack,
    fn: RewardFunction,
    profile: str,
    settings: WhatIfSettings,
    on_iteration: Callable[[], None],
) -> tuple[PolicyNetwork, dict[str, Any] | None]:
    """The policy trained the same way under the current reward ``fn``: trained once per (pack,
    calibration, reward, profile, settings) and kept under the local data folder, so the what-ifs
    an expert asks one after another train only their own policy. Training info is None when kept."""
    import hashlib
    import json

    key = json.dumps(
        {
            "scenario": pack.scenario.spec.name,
            "calibration": (pack.calibration or {}).get("version"),
            "reward_sha256": fn.version,
            "signals": list(fn.signal_values),
            "scales": list(fn.outcome_scales),
            "profile": profile,
            "layout": pack.scenario.layout.dim,
            "settings": _overrides(settings),
        },
        sort_keys=True,
    )
    folder = ctx.local_dir("whatif-baselines", ctx.scenario, hashlib.sha256(key.encode()).hexdigest()[:24])
    try:
        return load_policy(folder).eval(), None
    except (FileNotFoundError, ValueError, RuntimeError):
        pass  # not kept yet (or unreadable): train it
    policy, info = train_under(pack, fn, profile, settings, on_iteration)
    if not ctx.dry_run:
        save_policy(policy, folder, {"whatif_baseline": json.loads(key)})
    return policy, info


def registry_champion(ctx: StepServices, obs_dim: int, dst: Path) -> tuple[PolicyNetwork | None, str]:
    """The registry's champion (downloaded under ``dst``), or None with the reason it cannot be used."""
    name = policy_model_name(ctx.scenario)
    try:
        loaded = load_policy_ref(ctx, CHAMPION, dst)
    except Exception as exc:  # noqa: BLE001 - an unreachable registry falls back to a trained baseline
        return None, f"the registry could not be read ({type(exc).__name__}: {str(exc)[:200]})"
    if loaded is None:
        return None, f"{name} has no champion"
    if loaded.network.config.obs_dim != obs_dim:
        return None, f"champion v{loaded.version} reads another observation layout"
    return loaded.network, f"champion v{loaded.version}"


def reward_whatif(
    ctx: StepContext,
    sets: list[str],
    params: list[str],
    settings: WhatIfSettings | None = None,
    reward_fn: str | None = None,
    save: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """Answer a reward what-if (see the module doc); bad input is a UserError before anything runs."""
    settings = settings or WhatIfSettings()
    cfg = ctx.config.evaluate
    episodes = count(
        "--episodes", settings.episodes if settings.episodes is not None else cfg.episodes, maximum=MAX_EPISODES
    )
    pack = ctx.load_pack()
    choice = ctx.reward_choice(reward_fn, pack)
    base = pack.reward_fn(choice.reward_fn)
    change: RewardChange = resolve_change(base, sets, params)
    label = next_label(pack)
    profile = default_profile(pack, "sandbox", ctx.config.train.profile)
    world = "calibrated sandbox" if profile == CALIBRATED else f"{profile!r} world (no calibration yet)"
    kpis = compile_kpis(pack.scenario, pack.rules)
    clusters = settings.clusters or int(ctx.config.audit.clusters)
    set_torch_threads(settings.threads)
    notes: list[str] = []

    with tempfile.TemporaryDirectory(prefix="rlops-whatif-") as tmp:
        changed = changed_reward_fn(
            base, change, label, Path(tmp), pack.rules, pack.scenario.action_names, pack.scenario.role_names
        )
        champion, champion_desc = registry_champion(ctx, pack.scenario.layout.dim, Path(tmp) / "champion")
        per_run = _iterations(pack, settings)
        bar = progress_bar(progress, total=per_run * (1 if champion is not None else 2) + 3, desc="what-if", unit="it")
        done_its = [0]

        def tick() -> None:
            done_its[0] += 1
            bar.update(1)

        def finish_training(runs: int) -> None:  # an early stop skips the rest of the budget
            bar.update(max(per_run * runs - done_its[0], 0))
            done_its[0] = per_run * runs

        bar.set_description("what-if: training under the changed reward")
        whatif_policy, whatif_training = train_under(pack, changed, profile, settings, tick)
        finish_training(1)
        baseline_training = None
        if champion is None:
            notes.append(f"{champion_desc}: compared with a policy trained the same way under reward {base.label}")
            bar.set_description(f"what-if: training the baseline under reward {base.label}")
            champion, baseline_training = baseline_policy(ctx, pack, base, profile, settings, tick)
            finish_training(2)
            champion_desc = f"a policy trained under reward {base.label} (no usable champion)"
        rewards = {"current": base, "changed": changed}
        bar.set_description("what-if: held-out episodes")
        played_c = play(pack, _act(champion), rewards, kpis, profile, episodes, cfg.seed)
        played_w = play(pack, _act(whatif_policy), rewards, kpis, profile, episodes, cfg.seed)
        bar.update(1)
        env = BatchedEnv(pack.scenario, base, num_envs=episodes, profile=profile)
        env.reset(cfg.seed)
        codes = env.S[:, pack.scenario.columns["episode.segment"]].clone()
        names = ["base"] + [p.name for p in pack.scenario.spec.profiles[profile].population]
        segments = segment_masks(pack, env.S, codes, names, dict(cfg.segments))
        rates = {"completion_rate", "human_takeover_rate"} | {k.name for k in kpis if k.is_rate}
        figures = compare(played_c, played_w, segments, rates, settings.confidence)
        bar.update(1)
        bar.set_description("what-if: decision map")
        dmap = decision_map_change(
            pack, played_c, played_w, _greedy(champion), _greedy(whatif_policy), clusters, settings.seed
        )
        bar.update(1)
        bar.close()
        saved = None
        if save and not ctx.dry_run:
            saved = save_reward_module(pack.path, changed, label)
        source = changed.source
    result = {
        "scenario": ctx.scenario,
        "change": change.describe(),
        "weights": dict(change.weights),
        "params": dict(change.params),
        "reward_fn": base.label,
        "reward_fn_sha256": base.version,
        "reward_fn_source": choice.source,
        "whatif_reward_fn": label,
        "whatif_reward_fn_sha256": changed.version,
        "whatif_weights": changed.weights_at(0),
        "saved_as": str(saved) if saved else None,
        "would_save_as": str(pack.path / f"reward_{label}.py") if saved is None else None,
        "champion": champion_desc,
        "world": world,
        "profile": profile,
        "calibration_version": (pack.calibration or {}).get("version"),
        "episodes": episodes,
        "seed": cfg.seed,
        "confidence": settings.confidence,
        "kpis": _kpi_catalogue(kpis),
        "segments": figures,
        "decision_map": dmap,
        "training": {"whatif": whatif_training, "baseline": baseline_training},
        "notes": notes,
        "source": source,
        "dry_run": ctx.dry_run,
    }
    result["direction"] = weight_direction(result, base)
    return result


def _act(policy: PolicyNetwork) -> Callable[[BatchedEnv], torch.Tensor]:
    def act(env: BatchedEnv) -> torch.Tensor:
        return policy.act(env.observe(), deterministic=True).action.to(env.device)

    return act


def _kpi_catalogue(kpis: Any) -> dict[str, dict[str, Any]]:
    """What each KPI means: the built-in ones and the pack's."""
    out: dict[str, dict[str, Any]] = {
        "completion_rate": {
            "description": "episodes that ended by a terminal action, not by a human or the horizon",
            "better": "higher",
            "rate": True,
        },
        "human_takeover_rate": {"description": "episodes handed to a human", "better": "lower", "rate": True},
        "handling_steps": {"description": "steps per episode", "better": "lower", "rate": False},
        "handling_ms": {"description": "simulated handling time per episode (ms)", "better": "lower", "rate": False},
    }
    for k in kpis:
        out[k.name] = {
            "description": k.spec.description,
            "expr": k.spec.expr,
            "when": k.spec.when,
            "better": k.spec.better,
            "rule_ref": k.spec.rule_ref,
            "rate": k.is_rate,
        }
    return out


__all__ = ["WhatIfSettings", "next_label", "registry_champion", "reward_whatif", "train_under"]
