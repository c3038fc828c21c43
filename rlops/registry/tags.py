"""Every MLflow tag key rlops writes on runs and registered models, defined once, one prefix.

Run tags (``rlops.*``) say what a run is: the step, the scenario, the run key (the data interval
of the pipeline pass), the Airflow DAG run that produced it. A pass's parent run carries
``rlops.pass = true``; its step runs nest under it through MLflow's own ``mlflow.parentRunId``.

Registered-model tags record what rlops itself did with the aliases, so a change made around
rlops (an alias set by hand in the MLflow UI) can be told apart from rlops' own writes:
``rlops.alias.<alias>`` holds the version rlops last pointed ``<alias>`` at.

Model-version tags under ``rlops.promotion.*`` hold the outcome of a promotion requested from
the MLflow UI (through the webhook) and of the hand-set-champion check. The lineage tags of a
version (``reward_fn``, ``reward_fn_sha256``, ``calibration_version``, ``data_version``, ``traffic_fraction``…)
keep their established names: serving clients (``rlops.agent_sdk.policy_client``) and registries
already in use read them, so they are listed here under :data:`VERSION` but not renamed.

Nothing else in the code base spells an ``rlops.`` tag key; import the constant.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "rlops."

# --------------------------------------------------------------------------- run tags
STEP: Final = "rlops.step"  # capture, drift, recalibrate, train_policy, …
SCENARIO: Final = "rlops.scenario"
RUN_KEY: Final = "rlops.run_key"  # the data interval of the pass
DAG_RUN_ID: Final = "rlops.dag_run_id"  # Airflow's run id when a DAG task ran the step
PASS: Final = "rlops.pass"  # "true" on the parent run of one pipeline pass
CANDIDATE: Final = "rlops.candidate"  # policy version judged by an evaluate run
BASELINE: Final = "rlops.baseline"  # what the candidate was compared with
PASSED: Final = "rlops.passed"  # gate verdict of an evaluate run
OPE_STATE: Final = "rlops.ope.state"  # the ope:dr gate of an evaluate run: pass | fail | skipped | off
OPE_REASON: Final = "rlops.ope.reason"  # why that gate was skipped (or is off)
MODE: Final = "rlops.mode"  # full | incremental training
PARENT_CHAMPION: Final = "rlops.parent_champion"
REWARD_SOURCE: Final = "rlops.reward_source"  # scripted | model | blend
REWARD_MODEL_VERSION: Final = "rlops.reward_model_version"
REWARD_FN_SHA256: Final = "rlops.reward_fn_sha256"
CALIBRATION_VERSION: Final = "rlops.calibration_version"
TRAIN_FINGERPRINT: Final = "rlops.train_fingerprint"  # the inputs of a training (resume finds its runs)
TRAIN_SOURCE: Final = "rlops.train.source"  # sandbox | logs: what a training run learnt from
CLOSED_STALE_RUNS: Final = "rlops.closed_stale_runs"  # runs of a killed attempt this one closed
PID: Final = "rlops.pid"  # process and host of a step run (a killed one is closed by the next)
HOST: Final = "rlops.host"
CLOSED_BY: Final = "rlops.closed_by"  # on a run closed as KILLED: the run that did it
MODEL_VERSION: Final = "rlops.model_version"  # the version a training run registered
STRESS_VERDICT: Final = "rlops.stress_test"
PROMOTION_ACTION: Final = "rlops.promotion.action"  # champion | challenger | none, on a promote run
ALERT_FALLBACK: Final = "rlops.alert.fallback"  # on a capture run: live rule-engine fallbacks over the threshold
ALERT_QUARANTINE: Final = "rlops.alert.quarantine"  # on a capture run: more rows quarantined than allowed

# Step names (the value of STEP) — also the first word of a step run's name.
CAPTURE, DRIFT, RECALIBRATE = "capture", "drift", "recalibrate"
TRAIN_REWARD_MODEL, TRAIN_POLICY, STRESS_TEST = "train_reward_model", "train_policy", "stress_test"
EVALUATE, PROMOTE, AUDIT, REWARD_FN = "evaluate", "promote", "audit", "reward_fn"
TUNE, TUNE_TRIAL = "tune", "tune_trial"
SIMULATE, TIMELINE = "simulate", "timeline"
ROLLOUT = "rollout"

# --------------------------------------------------------------------------- experiment tags
# MLflow 3's UI opens an experiment on the view its kind names; without it, on the GenAI overview.
EXPERIMENT_KIND: Final = "mlflow.experimentKind"
EXPERIMENT_KIND_TRAINING: Final = "custom_model_development"  # runs, metrics and models first

# --------------------------------------------------------------------------- registered-model tags
ALIAS_WRITTEN_PREFIX: Final = "rlops.alias."  # + alias name → version rlops last set it to
ALIAS_SIGNATURE_SUFFIX: Final = ".sig"  # + on the alias tag: rlops' HMAC of its own move, with its key id
REGISTRY_KEY_ID: Final = "rlops.registry.key_id"  # the key id the deployment signs alias records with


CHAMPION_HISTORY: Final = "rlops.champion.history"  # versions that were champion before, oldest first (JSON)
CHAMPION_FIRST_AT: Final = "rlops.champion.first_at"  # when rlops made the model's first champion (ISO 8601)
CHAMPION_HISTORY_SIGNATURE: Final = "rlops.champion.history.sig"  # rlops' HMAC of that history, with its key id


def alias_written(alias: str) -> str:
    """The registered-model tag holding the version rlops last pointed ``alias`` at."""
    return f"{ALIAS_WRITTEN_PREFIX}{alias}"


def alias_signature(alias: str) -> str:
    """The registered-model tag holding rlops' signature of its last move of ``alias``."""
    return f"{ALIAS_WRITTEN_PREFIX}{alias}{ALIAS_SIGNATURE_SUFFIX}"


# --------------------------------------------------------------------------- model-version tags
ROLLED_BACK: Final = "rlops.rolled_back"
ROLLED_BACK_REASON: Final = "rlops.rolled_back.reason"  # why the roll-out DAG (or a person) demoted it
ROLLOUT_ACTION: Final = "rlops.rollout.action"  # advanced | finished | rolled_back | held | withdrawn
ROLLOUT_REASON: Final = "rlops.rollout.reason"
ROLLOUT_STAGE_STARTED: Final = "rlops.rollout.stage_started"  # end of the run key that set the current share (ISO)
ROLLOUT_STAGE: Final = "rlops.rollout.stage"  # index in evaluate.rollout_stages of the stage it serves (segment stages)
PROMOTION_OUTCOME: Final = "rlops.promotion.outcome"  # see OUTCOMES
PROMOTION_REASON: Final = "rlops.promotion.reason"
PROMOTION_REQUESTED_BY: Final = "rlops.promotion.requested_by"  # rlops | mlflow-ui-alias | manual-champion
PROMOTION_AT: Final = "rlops.promotion.at"
# The fate of a version, latest first: every change of it rewrites all four promotion tags, so a
# version never shows an outcome older than its aliases (a new champion carries no "rejected").
# An alias moving off a version rewrites them too: the replaced champion reads "previous", a former
# champion no alias points at any more "retired", a challenger that stopped serving "withdrawn".
OUTCOME_CHAMPION, OUTCOME_CHALLENGER, OUTCOME_REJECTED = "champion", "challenger", "rejected"
OUTCOME_REQUESTED, OUTCOME_ROLLED_BACK, OUTCOME_ERROR = "requested", "rolled_back", "error"
OUTCOME_PREVIOUS, OUTCOME_RETIRED, OUTCOME_WITHDRAWN = "previous", "retired", "withdrawn"
OUTCOMES: Final = (
    OUTCOME_CHAMPION,
    OUTCOME_CHALLENGER,
    OUTCOME_REJECTED,
    OUTCOME_REQUESTED,
    OUTCOME_ROLLED_BACK,
    OUTCOME_ERROR,
    OUTCOME_PREVIOUS,
    OUTCOME_RETIRED,
    OUTCOME_WITHDRAWN,
)
REQUESTED_BY_RLOPS: Final = "rlops"  # a promotion or rollback run by the CLI or a DAG
MANUAL_CHAMPION: Final = "rlops.manual_champion"  # regated | reverted, on the hand-set version
MANUAL_CHAMPION_REASON: Final = "rlops.manual_champion.reason"


class VERSION:
    """Lineage and state tags of a policy version (established names, see the module doc)."""

    REWARD_FN = "reward_fn"  # the label a person reads, e.g. v1
    REWARD_FN_SHA256 = "reward_fn_sha256"  # the sha256 of the reward function's source
    CALIBRATION_VERSION = "calibration_version"
    DATA_VERSION = "data_version"
    RUN_KEY = "run_key"
    RUN_ID = "run_id"
    TRAIN_FINGERPRINT = "train_fingerprint"
    EVAL_PASSED = "eval_passed"
    EVAL_RUN_ID = "eval_run_id"
    EVAL_BASELINE = "eval_baseline"
    TRAFFIC_FRACTION = "traffic_fraction"
    TRAFFIC_SEGMENT = "traffic_segment"  # the segment expression the challenger's share applies to ("": everyone)
    PROMOTED_AT = "promoted_at"
    STRESS_TEST = "stress_test"
    STRESS_REPORT = "stress_report"  # the storage URI of the report behind STRESS_TEST
    SHA256 = "sha256"
    REWARD_FN_MODEL_VERSION = "reward_fn_model_version"
    REWARD_MODEL_VERSION = "reward_model_version"
    MODE = "mode"
    PARENT_CHAMPION = "parent_champion"
