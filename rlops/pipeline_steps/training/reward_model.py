"""``rlops train reward-model``: fit the reward model and register it in MLflow.

Training pairs come from two sources: preference pairs generated in the (calibrated) sandbox —
two legal actions in the same state, the one with the higher expected return preferred — and the
human labels collected by the label queue (the labelled action preferred over every other legal
action). The model is logged to MLflow and registered as ``<scenario>-reward-model`` with its
held-out pairwise accuracy and rank correlation; ``--score-traces`` then labels historical traces
with the model's score.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.arguments import MAX_EPISODES, count
from rlops.common.step_result import StepResult
from rlops.model.reward_model import PreferencePairs, RewardModelConfig, save_reward_model, train_reward_model
from rlops.model.reward_pairs import build_preference_pairs
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.labels.select import labels_as_pairs
from rlops.pipeline_steps.labels.step import finished_labels
from rlops.registry import tags as T
from rlops.registry.client import reward_model_name

if TYPE_CHECKING:
    from rlops.common.params_model import QueueConfig
    from rlops.model.reward_model import PreferencePairs
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack


def human_pairs(services: StepServices, queue: QueueConfig, pack: Pack) -> PreferencePairs | None:
    """Pairs from the label queue's finished labels (None when there are none)."""
    labels = finished_labels(services, queue)
    if labels.empty:
        return None
    pairs = labels_as_pairs(pack, labels)
    return pairs if len(pairs) else None


@dataclass(frozen=True)
class RewardModelSummary(StepResult):
    """A reward model trained and registered, or (a dry run) the plan of one."""

    scenario: str
    run_key: str
    sandbox_pairs: int
    """Preference pairs asked of the sandbox."""
    reward_fn: str
    reward_fn_sha256: str
    dry_run: bool
    model_version: str | None = None
    """The registered ``<scenario>-reward-model`` version (None: a dry run)."""
    run_id: str | None = None
    pairs: int | None = None
    """Pairs trained on: the sandbox's and the human labels'."""
    human_pairs: int | None = None
    heldout_pairwise_accuracy: float | None = None
    spearman: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """A dry run says in ``model_version`` why there is none, and lists only the plan."""
        out = super().as_dict()
        if self.dry_run:
            plan = ("scenario", "run_key", "sandbox_pairs", "reward_fn", "reward_fn_sha256", "dry_run")
            return {**{k: out[k] for k in plan}, "model_version": NOT_TRAINED}
        return {k: v for k, v in out.items() if k != "dry_run"}


#: What a dry run says in place of the version.
NOT_TRAINED = "not computed: a dry run does not train or register the reward model"


def train_reward_model_step(
    ctx: StepContext, reward_fn: str | None = None, pairs: int | None = None
) -> RewardModelSummary:
    """Build pairs, train, log and register; returns the version and its held-out metrics. A dry
    run returns the plan: it trains nothing."""
    section = ctx.config.reward_model.model_dump()
    n_pairs = count("--pairs", pairs if pairs is not None else section.pop("pairs"), maximum=MAX_EPISODES)
    section.pop("pairs", None)
    seed = ctx.config.seed
    pack = ctx.load_pack()
    label = ctx.reward_choice(reward_fn, pack).reward_fn
    fn = pack.reward_fn(label)
    plan = {
        "scenario": ctx.scenario,
        "run_key": ctx.run_key,
        "sandbox_pairs": n_pairs,
        "reward_fn": label,
        "reward_fn_sha256": fn.version,
    }
    if ctx.dry_run:  # the version and its held-out metrics exist only once trained and registered
        return RewardModelSummary(ctx.scenario, ctx.run_key, n_pairs, label, fn.version, dry_run=True)
    data = build_preference_pairs(pack, n_pairs, seed=seed, reward_fn=label)
    labelled = human_pairs(ctx, ctx.config.label_queue, pack)
    if labelled is not None:
        data = PreferencePairs.cat([data, labelled])
    cfg = RewardModelConfig.from_params(section, seed=seed)  # the typed block's fields, seeded by `seed`
    model, metrics = train_reward_model(cfg, data)
    name = reward_model_name(ctx.scenario)

    with step_run(ctx, T.TRAIN_REWARD_MODEL, extra_tags={T.REWARD_FN_SHA256: fn.version}) as run:
        run.log_params(
            {
                **plan,
                "human_pairs": 0 if labelled is None else len(labelled),
                **{f"rm.{k}": v for k, v in cfg.__dict__.items()},
            }
        )
        run.log_metric_steps((i, {"rm.train_loss": loss}) for i, loss in enumerate(metrics.history))
        run.log_metrics({f"rm.{k}": float(v) for k, v in metrics.to_dict().items()}, step=len(metrics.history))
        with tempfile.TemporaryDirectory() as tmp:
            save_reward_model(model, Path(tmp) / "reward_model", metadata={**plan, **metrics.to_dict()})
            run.log_artifact(Path(tmp) / "reward_model", "reward_model")
        version = ctx.tracker.register_model(
            run.run_id,
            "reward_model",
            name,
            tags={
                "reward_fn_sha256": fn.version,
                "reward_fn": label,
                "run_key": ctx.run_key,
                "pairwise_accuracy": round(metrics.heldout_pairwise_accuracy, 4),
                "spearman": round(metrics.spearman, 4),
            },
        )
    return RewardModelSummary(
        ctx.scenario,
        ctx.run_key,
        n_pairs,
        label,
        fn.version,
        dry_run=False,
        model_version=version,
        run_id=run.run_id,
        pairs=len(data),
        human_pairs=0 if labelled is None else len(labelled),
        heldout_pairwise_accuracy=round(metrics.heldout_pairwise_accuracy, 4),
        spearman=round(metrics.spearman, 4),
    )
