"""Train a candidate policy with masked PPO and register it as a new ``<scenario>-policy`` version.

``rlops train policy --mode full|incremental`` runs :func:`train_policy`:

* the environment is the scenario pack with the latest sandbox calibration, stepping
  ``train.num_envs`` episodes at once on the GPU when there is one;
* the reward function is ``--reward-fn`` (else the pack's or the project's ``reward_fn``); its source
  is registered as a ``<scenario>-reward-fn`` version (the same source is never registered twice);
* ``full`` trains from scratch for ``train.total_timesteps``; ``incremental`` warm-starts from
  the current ``champion`` for ``train.incremental_timesteps`` with the EWC penalty
  (``train.ewc_lambda``), and trains from scratch, saying so, when there is no champion yet;
* one MLflow run in the scenario's experiment holds the params, per-iteration metrics, a
  learning-curve plot and the policy as an MLflow pyfunc model (``policy_model/``), registered
  with lineage tags: ``reward_fn`` and ``reward_fn_sha256``, ``reward_fn_model_version``,
  ``calibration_version``, ``data_version``, ``parent_champion``, ``mode``, ``timesteps``,
  ``train_seconds`` (and ``run_key``, ``train_fingerprint``).

Settings: the ``ppo:`` block (``rlops.common.ppo_config.PPOConfig``), overridden by keys of the
``train:`` block with the same names, then by arguments. The other ``train:`` keys are this
step's own (see ``params.yaml``); ``train.threads`` sets the torch thread count
(:mod:`rlops.common.threads`), recorded as the run's ``threads`` param and in the result.

Resumable and idempotent: checkpoints go to ``<local_dir>/checkpoints/<scenario>/<run_key>/<mode>``
and a re-run with the same run key continues from the newest one; a run whose exact inputs
(fingerprint) were already registered returns that version instead of training again.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import tempfile
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.arguments import MAX_TIMESTEPS, choice, count
from rlops.common.config import resolve_local
from rlops.common.ppo_config import PPOConfig
from rlops.common.threads import resolve_threads
from rlops.model.checkpoint import latest_checkpoint, list_checkpoints
from rlops.model.device import resolve_device
from rlops.model.pack_defaults import derive_defaults
from rlops.model.reward_source import apply_reward_source, model_only
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.pass_run import ensure_pass_run, step_run
from rlops.pipeline_steps.infra.policy_loader import champion_policy
from rlops.pipeline_steps.infra.signal_store import SignalReading
from rlops.pipeline_steps.infra.signal_store import lineage as signal_lineage
from rlops.pipeline_steps.training.candidate import fingerprint
from rlops.pipeline_steps.training.candidate import reused_summary as _reused_summary
from rlops.pipeline_steps.training.dual_track import resolve_reward_source, warm_start
from rlops.pipeline_steps.training.from_logs import train_from_logs
from rlops.pipeline_steps.training.hot_reload import RewardSwitchPoller
from rlops.pipeline_steps.training.ppo_run import log_training_inputs, train_and_register
from rlops.pipeline_steps.training.relabel import latest_reward_model_version, load_reward_model_version
from rlops.pipeline_steps.training.request import TrainRequest
from rlops.pipeline_steps.training.summary import DryRunPlan, TrainInputs, TrainSummary
from rlops.registry import tags as T
from rlops.registry.client import policy_model_name
from rlops.sandbox.profiles import default_profile

if TYPE_CHECKING:
    from rlops.model.pack_defaults import TrainingPlan
    from rlops.model.policy import PolicyNetwork
    from rlops.sandbox.pack import Pack

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- settings
def ppo_config(
    ctx: StepContext,
    pack: Pack,
    mode: str,
    timesteps: int | None = None,
    checkpoint_dir: Path | None = None,
    **overrides: Any,
) -> TrainingPlan:
    """The :class:`~rlops.model.pack_defaults.TrainingPlan` of this run (env count + PPOConfig): what the
    pack implies < ``ppo:`` block < ``train:`` keys < arguments. Checkpoints are written every
    ``checkpoint_every`` iterations (default 10) to ``checkpoint_dir``; without one (dry runs) never.
    The torch thread count is ``train.threads`` resolved for this process (:mod:`rlops.common.threads`)."""
    known = {f.name for f in fields(PPOConfig)}
    train = ctx.config.train
    # null in the typed blocks: the pack decides (num_steps, γ, minibatches) or `ppo:` does (train's overrides)
    merged = {k: v for k, v in ctx.config.ppo.model_dump().items() if v is not None}
    merged.update({k: v for k, v in train.model_dump().items() if k in known and v is not None})
    if mode == "incremental":
        merged["total_timesteps"] = train.incremental_timesteps
    if timesteps is not None:
        merged["total_timesteps"] = int(timesteps)
    if train.num_envs:
        merged["num_envs"] = train.num_envs
    merged.update({k: v for k, v in overrides.items() if v is not None})
    if overrides.get("torch_threads") is None:  # train.threads wins over ppo.torch_threads
        merged["torch_threads"] = resolve_threads(train.threads)
    merged["mode"] = mode
    merged["checkpoint_dir"] = str(checkpoint_dir) if checkpoint_dir is not None else None
    merged["checkpoint_every"] = train.checkpoint_every if checkpoint_dir is not None else 0
    # What the params leave open (env count, rollout length, γ, minibatches) comes from the pack.
    merged["device"] = resolve_device(str(merged.get("device") or "auto")).type
    return derive_defaults(pack, **merged)


def reward_label(ctx: StepContext, reward_fn: str | None) -> str:
    """The label of the reward function that applies (see :mod:`rlops.sandbox.reward_choice`)."""
    return ctx.reward_choice(reward_fn).reward_fn


def calibration_info(ctx: StepContext) -> tuple[dict[str, Any] | None, str]:
    cal = ctx.read_calibration("latest")
    return cal, str((cal or {}).get("version") or "none")


def checkpoint_folder(ctx: StepContext, mode: str, create: bool = True) -> Path:
    parts = ("checkpoints", ctx.scenario, ctx.run_key, mode)
    if create:
        return ctx.local_dir(*parts)
    return Path(resolve_local(ctx.config.local_dir)).joinpath(*parts)


# --------------------------------------------------------------------------- the step
def train_policy(ctx: StepContext, request: TrainRequest | None = None, **ppo_overrides: Any) -> TrainSummary:
    """Train (or resume) a candidate as ``request`` asks and register it; returns its inputs and
    outcome (:class:`~rlops.pipeline_steps.training.summary.TrainSummary`).

    ``request.reward_source`` (else ``train.reward_source``): ``scripted``, ``model`` or ``blend``
    (scripted + ``reward_blend_lambda`` · reward model, see :mod:`rlops.model.reward_source`); the last
    two use ``reward_model_version`` of ``<scenario>-reward-model`` (default: the newest) and, in
    ``full`` mode, warm-start by behaviour cloning from the run key's relabelled traces when there are
    any. ``reward_switch_to`` at ``reward_switch_at_iteration`` schedules a reward function switch;
    requests written by ``rlops train switch-reward`` for this run key are picked up between
    iterations too. ``ppo_overrides``: PPO settings over the params' (``progress``, a tuning trial's).
    A dry run decides what the real run would — the mode (the champion is loaded to compare its
    layout), the reuse of a version trained with the same fingerprint — and trains and writes
    nothing: its ``plan`` says what the real run would do.
    """
    request = request or TrainRequest()
    mode, timesteps, reward_fn = request.mode, request.timesteps, request.reward_fn
    choice("--mode", mode, ("full", "incremental"))
    if timesteps is not None:
        timesteps = count("--timesteps", timesteps, maximum=MAX_TIMESTEPS)
    if request.device is not None:
        ppo_overrides["device"] = request.device

    if (request.source or ctx.config.train.source) == "logs":
        return train_from_logs(ctx, request, reward_label(ctx, reward_fn))

    pack = ctx.load_pack()
    source = resolve_reward_source(ctx, request.reward_source, request.reward_blend_lambda)
    label = reward_label(ctx, reward_fn)
    reward_function = pack.reward_fn(label)
    signals = _signals_of(ctx, pack, reward_function)
    cal, cal_version = calibration_info(ctx)
    data_version = str((cal or {}).get("data_version") or f"run_key={ctx.run_key}")
    # The sandbox as last recalibrated to live traffic, else the pack's default profile.
    profile = default_profile(pack, "sandbox", ctx.config.train.profile)
    name = policy_model_name(ctx.scenario)

    with tempfile.TemporaryDirectory(prefix="rlops-train-") as tmp:
        mode_used, note, parent, init = _starting_point(ctx, pack, mode, name, Path(tmp))
        ckpt = checkpoint_folder(ctx, mode_used, create=not ctx.dry_run)
        plan = ppo_config(ctx, pack, mode_used, timesteps, None if ctx.dry_run else ckpt, **ppo_overrides)
        cfg, num_envs = plan.config, plan.num_envs
        rm_version, rm_model = _reward_model(ctx, source, request.reward_model_version)
        fp = fingerprint(
            scenario=ctx.scenario,
            run_key=ctx.run_key,
            mode=mode_used,
            reward=reward_function.version,
            **({"reward_signals": reward_function.signals_in_force} if reward_function.signal_weights else {}),
            reward_source=source.kind,
            blend_lambda=source.model_weight,
            reward_model=rm_version,
            **({"reward_centred": source.centred} if source.needs_model else {}),
            parent=parent,
            calibration=cal_version,
            num_envs=num_envs,
            profile=profile,
            ppo={
                k: v
                for k, v in cfg.to_params().items()
                if k
                not in ("checkpoint_dir", "checkpoint_every", "keep_checkpoints", "progress", "device", "torch_threads")
            },
        )
        inputs = TrainInputs(
            scenario=ctx.scenario,
            run_key=ctx.run_key,
            requested_mode=mode,
            mode=mode_used,
            note=note,
            parent_champion=parent,
            timesteps_budget=cfg.total_timesteps,
            reward_fn=label,
            reward_fn_sha256=reward_function.version,
            reward_signals={r.name: r.value for r in signals},
            reward_signal_status={r.name: signal_lineage([r])[f"signal.{r.name}.status"] for r in signals},
            calibration_version=cal_version,
            data_version=data_version,
            num_envs=num_envs,
            threads=cfg.torch_threads,
            profile=profile,
            checkpoint_dir=str(ckpt),
            reward_source=source.kind,
            reward_blend_lambda=source.model_weight,
            reward_model_centred=source.centred,
            reward_model_version=rm_version,
        )
        # the reuse is decided before the dry run stops: an identical training returns its version
        existing = ctx.tracker.find_version_by_tag(name, "train_fingerprint", fp)
        if existing is not None:
            return _reused_summary(ctx, name, existing, inputs)
        if ctx.dry_run:
            return _dry_run_summary(inputs, ckpt, name)

        _prepare_checkpoints(ckpt, fp)
        env = pack.make_env(
            num_envs, reward_fn=label, profile=profile, device=resolve_device(cfg.device).type, seed=cfg.seed
        )

        apply_reward_source(env, source, rm_model)
        init, cfg, cloned = _behaviour_cloning_start(ctx, pack, cfg, source, init)

        pass_run = ensure_pass_run(ctx.tracker, ctx.scenario, ctx.run_key, ctx.dag_run_id)
        fn_version = ctx.tracker.register_reward_fn(
            ctx.scenario,
            reward_function.path,
            reward_function.version,
            reward_function.rule_refs,
            label,
            parent_run_id=pass_run,
        )
        run_tags = {
            T.MODE: mode_used,
            T.REWARD_FN_SHA256: reward_function.version,
            T.PARENT_CHAMPION: parent or "none",
            T.CALIBRATION_VERSION: cal_version,
            T.REWARD_SOURCE: source.kind,
            T.REWARD_MODEL_VERSION: rm_version or "none",
            T.TRAIN_FINGERPRINT: fp,
            T.TRAIN_SOURCE: "sandbox",
            # pid + host let `rlops train status --pid` find the run of a training in progress.
            T.PID: os.getpid(),
            T.HOST: socket.gethostname(),
            **signal_lineage(signals),
        }
        # A training killed mid-run left its run RUNNING: this attempt resumes its work, so it closes it.
        stale = ctx.tracker.close_stale_runs({T.STEP: T.TRAIN_POLICY, T.TRAIN_FINGERPRINT: fp})

        switch_at, switch_label = request.reward_switch or (None, None)
        poller = RewardSwitchPoller(
            ctx, pack, switch_at, switch_label, wrap=model_only if source.kind == "model" else None
        )
        with step_run(ctx, T.TRAIN_POLICY, label=mode_used, extra_tags=run_tags) as run:
            if stale:
                run.set_tags({T.CLOSED_STALE_RUNS: ",".join(stale)})
            log_training_inputs(ctx, run, cal_version, cal)
            return train_and_register(ctx, pack, env, cfg, run, init, inputs, fp, fn_version, Path(tmp), poller, cloned)


def _signals_of(ctx: StepContext, pack: Pack, reward_fn: Any) -> list[SignalReading]:
    """The readings of the business signals ``reward_fn`` declares (its reward lineage with label and
    sha256); empty for a function without signal weights."""
    names = {sw.signal for sw in reward_fn.signal_weights}
    return [r for r in ctx.signal_readings(pack) if r.name in names]


def _starting_point(
    ctx: StepContext, pack: Pack, mode: str, name: str, tmp: Path
) -> tuple[str, str, str | None, PolicyNetwork | None]:
    """``(mode actually used, note, parent champion version, warm-start network)``: an incremental
    run falls back to full when there is no champion or it has another observation layout."""
    parent: str | None = None
    init: PolicyNetwork | None = None
    if mode == "incremental":  # a dry run loads it too: its layout decides the mode
        parent, init = champion_policy(ctx, tmp)
    mode_used, note = mode, ""
    if mode == "incremental" and parent is None:
        mode_used, note = "full", "no champion yet: trained from scratch (full) instead of warm-starting"
    elif init is not None and _layout_of(init) != _layout_of(pack):
        mode_used, note = (
            "full",
            (
                f"champion v{parent} was trained on another observation layout: trained "
                "from scratch (full) instead of warm-starting"
            ),
        )
        parent, init = None, None
    return mode_used, note, parent, init


def _reward_model(ctx: StepContext, source: Any, reward_model_version: str | None) -> tuple[str | None, Any]:
    """``(version, loaded model)`` of the reward model the source needs; a dry run only names it."""
    if not source.needs_model:
        return None, None

    if ctx.dry_run:
        return reward_model_version or latest_reward_model_version(ctx), None
    return load_reward_model_version(ctx, reward_model_version)


def _dry_run_summary(inputs: TrainInputs, ckpt: Path, name: str) -> TrainSummary:
    last = latest_checkpoint(ckpt) if ckpt.is_dir() else None
    parent = inputs.parent_champion
    plan = DryRunPlan(
        would_register=name,
        resume_from=str(last) if last else None,
        warm_start=f"champion v{parent}" if parent else "none (from scratch)",
    )
    return TrainSummary(inputs, model_version=None, mean_return=None, dry_run=True, plan=plan)


def _behaviour_cloning_start(
    ctx: StepContext, pack: Pack, cfg: Any, source: Any, init: PolicyNetwork | None
) -> tuple[PolicyNetwork | None, Any, dict[str, Any] | None]:
    """A learned reward with nothing to warm-start from: clone the relabelled traces first.
    Returns ``(init, cfg, behaviour-cloning summary or None)``."""
    bc: dict[str, Any] = {}
    if source.needs_model and init is None:
        init, bc = warm_start(ctx, pack, cfg)
        if init is not None:  # PPO continues from the cloned policy (no EWC: nothing to keep)
            cfg = dataclasses.replace(cfg, mode="incremental", ewc_lambda=0.0)
    return init, cfg, bc or None


def _layout_of(obj: Any) -> tuple[int, int, int]:
    c = getattr(obj, "config", None)
    if c is not None:
        return (c.n_features, c.n_actions, c.history_len)
    lay = obj.scenario.layout
    return (lay.n_features, lay.n_actions, lay.history_len)


def _prepare_checkpoints(ckpt: Path, fp: str) -> None:
    """Keep the checkpoints of the same run (same fingerprint) to resume; drop any other."""
    marker = ckpt / "fingerprint.txt"
    if marker.exists() and marker.read_text().strip() != fp:
        for old in list_checkpoints(ckpt):
            old.unlink(missing_ok=True)
    marker.write_text(fp + "\n")
