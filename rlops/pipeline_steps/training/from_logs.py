"""Train a candidate from logged traffic instead of the sandbox (``train.source: logs``).

Where the sandbox is wrong, every candidate trained in it inherits its error; the logs are what
production actually did. :func:`train_from_logs`

* reads the complete live episodes of the last ``train.logs_window_hours`` from the trace store
  (the rows the off-policy gate reads), and refuses a pack whose episodes are longer than one
  decision: multi-step logs need sequential off-policy learning, which this step does not do;
* holds out a share of the episodes (``train.logs_holdout_share``, by a hash of the episode id
  salted with ``train.logs_split_seed``, :mod:`rlops.pipeline_steps.training.log_split`), so the
  off-policy gate can judge the candidate on episodes it was not trained on;
* turns the training episodes into :class:`~rlops.model.offpolicy.LoggedDecisions` — the
  observation rebuilt with the pack's encoder as serving builds it, the legal-action mask, the
  logged action, its propensity (``propensity``, else ``exp(logp)``) and ``reward_total`` — and
  learns a softmax policy off-policy (:func:`rlops.model.offpolicy.train`, settings
  ``train.offpolicy``);
* registers it as PPO's candidates are (``policy_model/``, the same artifact and lineage tags),
  with ``train_source=logs`` and the split on the version, ``rlops.train.source`` on the run.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from rlops.common.errors import UserError
from rlops.model.offpolicy import LoggedDecisions, OffPolicyConfig, OffPolicyResult, train
from rlops.pipeline_steps.infra.pass_run import ensure_pass_run, step_run
from rlops.pipeline_steps.promotion.ope import logged_propensities
from rlops.pipeline_steps.promotion.ope_value import complete_live_episodes
from rlops.pipeline_steps.training.candidate import evaluate_trained, fingerprint, register_policy, reused_summary
from rlops.pipeline_steps.training.log_split import HoldOut
from rlops.pipeline_steps.training.summary import DryRunPlan, TrainedRun, TrainInputs, TrainSummary
from rlops.registry import tags as T
from rlops.registry.client import policy_model_name
from rlops.registry.descriptions import version_description
from rlops.sandbox.profiles import default_profile
from rlops.trace_store.states import action_codes, observations_from_traces

if TYPE_CHECKING:
    from rlops.common.params_training import TrainParams
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.pipeline_steps.training.setup import TrainingSetup
    from rlops.sandbox.pack import Pack

SOURCE = "logs"


@dataclass(frozen=True)
class LogWindow:
    """The logged episodes a training read and how they were split."""

    hours: float
    split: HoldOut
    train_episodes: int
    holdout_episodes: int

    def params(self) -> dict[str, Any]:
        return {
            "train.source": SOURCE,
            "logs.window_hours": f"{self.hours:g}",
            "logs.split_seed": self.split.seed,
            "logs.holdout_share": f"{self.split.share:g}",
            "logs.train_episodes": self.train_episodes,
            "logs.holdout_episodes": self.holdout_episodes,
        }


def require_one_step(pack: Pack) -> None:
    """Refuse a pack whose episodes can hold more than one decision."""
    horizon = int(pack.scenario.spec.horizon)
    if horizon != 1:
        raise UserError(
            f"train.source logs: pack {pack.name} has episodes of up to {horizon} decisions; learning from "
            "multi-step logs is not supported yet (only one-step packs, horizon: 1). Train in the sandbox "
            "(--source sandbox) instead."
        )


def logged_decisions(pack: Pack, rows: pd.DataFrame) -> LoggedDecisions:
    """The one-step episodes ``rows`` as tensors; a row without a usable propensity or a finite
    reward is a clear error (it cannot be weighted)."""
    mu = logged_propensities(rows)
    reward = pd.to_numeric(rows["reward_total"], errors="coerce").to_numpy(dtype=np.float64)
    bad_mu, bad_r = int((~np.isfinite(mu)).sum()), int((~np.isfinite(reward)).sum())
    if bad_mu or bad_r:
        raise UserError(
            f"train.source logs: {bad_mu} of {len(rows)} logged rows carry no usable propensity (propensity or "
            f"logp in (0, 1]) and {bad_r} no finite reward_total: capture them with the policy client, which "
            "records both"
        )
    obs, mask = observations_from_traces(pack, rows)
    return LoggedDecisions(
        obs=obs.float(),
        mask=mask.bool(),
        action=torch.as_tensor(action_codes(pack, rows["action"]), dtype=torch.long),
        propensity=torch.tensor(mu, dtype=torch.float32),
        reward=torch.tensor(reward, dtype=torch.float32),
        n_features=pack.scenario.layout.n_features,
    )


def read_logs(services: StepServices, settings: TrainParams, pack: Pack) -> tuple[LoggedDecisions, LogWindow]:
    """The training decisions of the window, and the window with its split."""
    hours = float(settings.logs_window_hours)
    rows = complete_live_episodes(
        services.traces.read(services.scenario, services.key.lookback(hours)).reset_index(drop=True)
    )
    split = HoldOut(int(settings.logs_split_seed), float(settings.logs_holdout_share))
    held = np.asarray(split.held_out(rows["episode_id"]), dtype=bool) if len(rows) else np.zeros(0, dtype=bool)
    train_rows = rows[~held]
    if train_rows.empty:
        raise UserError(
            f"train.source logs: no complete live episode of {services.scenario} to train on in the {hours:g} hours "
            f"before {services.run_key} ({int(held.sum())} held out); capture traffic first or widen "
            "train.logs_window_hours"
        )
    window = LogWindow(hours, split, int(train_rows["episode_id"].nunique()), int(rows[held]["episode_id"].nunique()))
    return logged_decisions(pack, train_rows), window


def train_from_logs(services: StepServices, setup: TrainingSetup) -> TrainSummary:
    """Learn a candidate from the window's logged traffic and register it (see the module)."""
    pack, settings, label = setup.pack, setup.train, setup.reward.reward_fn
    require_one_step(pack)
    reward_function = setup.reward_function
    cfg = OffPolicyConfig(**settings.offpolicy.model_dump())
    data, window = read_logs(services, settings, pack)
    profile = default_profile(pack, "sandbox", settings.profile)
    name = policy_model_name(services.scenario)
    fp = fingerprint(
        scenario=services.scenario,
        run_key=services.run_key,
        source=SOURCE,
        window=window.params(),
        decisions=data.n,
        reward=reward_function.version,
        offpolicy=cfg.to_params(),
    )
    inputs = TrainInputs(
        scenario=services.scenario,
        run_key=services.run_key,
        requested_mode=setup.request.mode,
        mode="full",
        note="trained on logged traffic (train.source logs): from scratch, no warm start",
        parent_champion=None,
        timesteps_budget=data.n,
        reward_fn=label,
        reward_fn_sha256=reward_function.version,
        reward_signals={},
        reward_signal_status={},
        calibration_version="none",
        data_version=f"logs:{window.hours:g}h-before-{services.run_key}",
        num_envs=0,
        threads=torch.get_num_threads(),
        profile=profile,
        checkpoint_dir="",
        reward_source="logged",
        reward_blend_lambda=0.0,
        reward_model_centred=False,
        reward_model_version=None,
    )
    existing = services.tracker.find_version_by_tag(name, "train_fingerprint", fp)
    if existing is not None:
        return reused_summary(services, name, existing, inputs)
    if services.dry_run:
        plan = DryRunPlan(would_register=name, resume_from=None, warm_start="none (from scratch, on logs)")
        return TrainSummary(inputs, model_version=None, mean_return=None, dry_run=True, plan=plan)

    pass_run = ensure_pass_run(services.tracker, services.scenario, services.run_key, services.dag_run_id)
    fn_version = services.tracker.register_reward_fn(
        services.scenario, reward_function.path, reward_function.version, reward_function.rule_refs, label, pass_run
    )
    run_tags = {T.MODE: "full", T.TRAIN_SOURCE: SOURCE, T.REWARD_FN_SHA256: reward_function.version}
    run_tags |= {T.TRAIN_FINGERPRINT: fp, T.PARENT_CHAMPION: "none", T.CALIBRATION_VERSION: "none"}
    with step_run(services, T.TRAIN_POLICY, label=SOURCE, extra_tags=run_tags) as run:
        run.log_params(
            {"scenario": services.scenario, "run_key": services.run_key, "reward_fn": label, **window.params()}
        )
        with run.buffered(every_s=10.0) as sink:
            result = train(cfg, data, tracker=sink)
        evaluation = evaluate_trained(pack, result.policy, label, settings.eval_episodes, settings.eval_seed, profile)
        run.log_metrics({**evaluation.metrics, **_estimates(result)}, step=cfg.epochs + 1)
        tags = {
            "reward_fn_sha256": reward_function.version,
            "reward_fn": label,
            "reward_fn_model_version": fn_version,
            "calibration_version": "none",
            "data_version": inputs.data_version,
            "parent_champion": "none",
            "mode": "full",
            "train_source": SOURCE,
            **window.split.tags(),
            "logs_window_hours": f"{window.hours:g}",
            "timesteps": data.n,
            "train_seconds": round(result.train_seconds, 3),
            "run_key": services.run_key,
            "train_fingerprint": fp,
            "run_id": run.run_id,
            "eval_mean_return": round(evaluation.mean_return, 6),
            "reward_source": "logged",
            "offpolicy_estimator": cfg.estimator,
            "offpolicy_estimate": f"{result.estimate:.6g}",
            "offpolicy_validation_greedy": f"{result.validation_estimate:.6g}",
        }
        with tempfile.TemporaryDirectory(prefix="rlops-train-logs-") as tmp:
            version = register_policy(
                services,
                run,
                pack,
                result.policy,
                tags,
                Path(tmp),
                description=version_description(
                    services.scenario, dataclasses.asdict(inputs), evaluation.mean_return, evaluation.completion_rate
                ),
            )
    trained = TrainedRun(
        completion_rate=evaluation.completion_rate,
        train_return=result.estimate,
        iterations=result.best_epoch,
        timesteps=data.n,
        train_seconds=round(result.train_seconds, 3),
        stagnated=False,
        reward_fn_model_version=fn_version,
        reward_switches=[],
        reward_fn_sha256_final=reward_function.version,
        resumed_from=None,
        behaviour_cloning=None,
    )
    return TrainSummary(
        inputs, model_version=version, mean_return=evaluation.mean_return, run_id=run.run_id, trained=trained
    )


def _estimates(result: OffPolicyResult) -> dict[str, float]:
    return {
        "offpolicy_estimate": result.estimate,
        "offpolicy_validation_greedy": result.validation_estimate,
        "offpolicy_best_epoch": float(result.best_epoch),
        "offpolicy_logged_value": result.logged_value,
        "offpolicy_ess": result.weights.ess,
        "offpolicy_clipped_share": result.weights.clipped_share,
        "offpolicy_max_ratio": result.weights.max_ratio,
    }
