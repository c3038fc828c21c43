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

from rlops.common.ppo_config import PPOConfig
from rlops.common.threads import resolve_threads
from rlops.model.checkpoint import latest_checkpoint, list_checkpoints
from rlops.model.device import resolve_device
from rlops.model.pack_defaults import derive_defaults
from rlops.model.reward_source import apply_reward_source, model_only
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.pass_run import ensure_pass_run, step_run
from rlops.pipeline_steps.infra.policy_loader import champion_policy
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.infra.signal_store import lineage as signal_lineage
from rlops.pipeline_steps.training.candidate import fingerprint
from rlops.pipeline_steps.training.candidate import reused_summary as _reused_summary
from rlops.pipeline_steps.training.dual_track import warm_start
from rlops.pipeline_steps.training.from_logs import train_from_logs
from rlops.pipeline_steps.training.hot_reload import RewardSwitchPoller
from rlops.pipeline_steps.training.ppo_run import log_training_inputs, train_and_register
from rlops.pipeline_steps.training.relabel import latest_reward_model_version, load_reward_model_version
from rlops.pipeline_steps.training.request import TrainRequest
from rlops.pipeline_steps.training.setup import TrainingSetup, resolve_training
from rlops.pipeline_steps.training.summary import DryRunPlan, TrainInputs, TrainSummary
from rlops.registry import tags as T
from rlops.registry.client import policy_model_name
from rlops.sandbox.profiles import default_profile

if TYPE_CHECKING:
    from rlops.common.params_training import PpoParams, TrainParams
    from rlops.model.pack_defaults import TrainingPlan
    from rlops.model.policy import PolicyNetwork
    from rlops.model.reward_source import RewardSource
    from rlops.sandbox.pack import Pack

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- settings
def ppo_config(
    train: TrainParams,
    ppo: PpoParams,
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
    # null in the typed blocks: the pack decides (num_steps, γ, minibatches) or `ppo:` does (train's overrides)
    merged = {k: v for k, v in ppo.model_dump().items() if v is not None}
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


def checkpoint_folder(services: StepServices, local_root: Path, mode: str, create: bool = True) -> Path:
    folder = local_root.joinpath("checkpoints", services.scenario, services.run_key, mode)
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return folder


# --------------------------------------------------------------------------- the step
def train_policy(ctx: StepContext, request: TrainRequest | None = None, **ppo_overrides: Any) -> TrainSummary:
    """Train (or resume) a candidate as ``request`` asks and register it; returns its inputs and
    outcome (:class:`~rlops.pipeline_steps.training.summary.TrainSummary`). The request and the run's
    params are resolved once (:func:`~rlops.pipeline_steps.training.setup.resolve_training`), then
    :func:`train_candidate` trains from that record."""
    return train_candidate(ctx, resolve_training(ctx, request), **ppo_overrides)


def train_candidate(services: StepServices, setup: TrainingSetup, **ppo_overrides: Any) -> TrainSummary:
    """Train (or resume) a candidate from ``setup`` and register it.

    ``setup.reward_source``: ``scripted``, ``model`` or ``blend``
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
    request, pack, source = setup.request, setup.pack, setup.reward_source
    mode, timesteps = request.mode, request.timesteps
    if request.device is not None:
        ppo_overrides["device"] = request.device
    if setup.source == "logs":
        return train_from_logs(services, setup)

    label, reward_function, signals = setup.reward.reward_fn, setup.reward_function, setup.signals
    cal, cal_version = setup.calibration, setup.calibration_version
    data_version = str((cal or {}).get("data_version") or f"run_key={services.run_key}")
    # The sandbox as last recalibrated to live traffic, else the pack's default profile.
    profile = default_profile(pack, "sandbox", setup.train.profile)
    name = policy_model_name(services.scenario)

    with tempfile.TemporaryDirectory(prefix="rlops-train-") as tmp:
        mode_used, note, parent, init = _starting_point(services, pack, mode, name, Path(tmp))
        ckpt = checkpoint_folder(services, setup.local_root, mode_used, create=not services.dry_run)
        plan = ppo_config(
            setup.train, setup.ppo, pack, mode_used, timesteps, None if services.dry_run else ckpt, **ppo_overrides
        )
        cfg, num_envs = plan.config, plan.num_envs
        rm_version, rm_model = _reward_model(services, source, request.reward_model_version)
        fp = fingerprint(
            scenario=services.scenario,
            run_key=services.run_key,
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
            scenario=services.scenario,
            run_key=services.run_key,
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
        existing = services.tracker.find_version_by_tag(name, "train_fingerprint", fp)
        if existing is not None:
            return _reused_summary(services, name, existing, inputs)
        if services.dry_run:
            return _dry_run_summary(inputs, ckpt, name)

        _prepare_checkpoints(ckpt, fp)
        env = pack.make_env(
            num_envs, reward_fn=label, profile=profile, device=resolve_device(cfg.device).type, seed=cfg.seed
        )

        apply_reward_source(env, source, rm_model)
        init, cfg, cloned = _behaviour_cloning_start(services, setup, cfg, init)

        pass_run = ensure_pass_run(services.tracker, services.scenario, services.run_key, services.dag_run_id)
        fn_version = services.tracker.register_reward_fn(
            services.scenario,
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
            **signal_lineage(list(signals)),
        }
        # A training killed mid-run left its run RUNNING: this attempt resumes its work, so it closes it.
        stale = services.tracker.close_stale_runs({T.STEP: T.TRAIN_POLICY, T.TRAIN_FINGERPRINT: fp})

        switch_at, switch_label = request.reward_switch or (None, None)
        poller = RewardSwitchPoller(
            services, pack, switch_at, switch_label, wrap=model_only if source.kind == "model" else None
        )
        with step_run(services, T.TRAIN_POLICY, label=mode_used, extra_tags=run_tags) as run:
            if stale:
                run.set_tags({T.CLOSED_STALE_RUNS: ",".join(stale)})
            log_training_inputs(services, run, cal_version, cal)
            return train_and_register(
                services, setup.train, pack, env, cfg, run, init, inputs, fp, fn_version, Path(tmp), poller, cloned
            )


def _starting_point(
    services: StepServices, pack: Pack, mode: str, name: str, tmp: Path
) -> tuple[str, str, str | None, PolicyNetwork | None]:
    """``(mode actually used, note, parent champion version, warm-start network)``: an incremental
    run falls back to full when there is no champion or it has another observation layout."""
    parent: str | None = None
    init: PolicyNetwork | None = None
    if mode == "incremental":  # a dry run loads it too: its layout decides the mode
        parent, init = champion_policy(services, tmp)
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


def _reward_model(
    services: StepServices, source: RewardSource, reward_model_version: str | None
) -> tuple[str | None, Any]:
    """``(version, loaded model)`` of the reward model the source needs; a dry run only names it."""
    if not source.needs_model:
        return None, None

    if services.dry_run:
        return reward_model_version or latest_reward_model_version(services), None
    return load_reward_model_version(services, reward_model_version)


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
    services: StepServices, setup: TrainingSetup, cfg: Any, init: PolicyNetwork | None
) -> tuple[PolicyNetwork | None, Any, dict[str, Any] | None]:
    """A learned reward with nothing to warm-start from: clone the relabelled traces first.
    Returns ``(init, cfg, behaviour-cloning summary or None)``."""
    bc: dict[str, Any] = {}
    if setup.reward_source.needs_model and init is None:
        init, bc = warm_start(services, setup, cfg)
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
