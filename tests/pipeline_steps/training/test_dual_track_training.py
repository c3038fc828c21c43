"""Dual track in training: the blend/model reward math on the batched env; the relabel step writes
one label per trace row next to the traces; a `blend` run warm-starts by behaviour cloning from the
relabelled steps and tags the policy version with the reward model version it used."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

from rlops.common.config import REPO_ROOT, deep_merge
from rlops.model.behaviour_cloning import select_high_reward
from rlops.model.reward_model import RewardModel
from rlops.model.reward_source import HOOK_NAME, RewardSource, apply_reward_source, blend_rewards, centred_scores
from rlops.pipeline_steps.infra.context import StepContext
from rlops.registry.client import policy_model_name

SCENARIO = "credit_approval"
RUN_KEY = "20260105T1000"


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(REPO_ROOT / "scenarios" / SCENARIO, check_liveness=False)


def _model(pack: Any, seed: int = 0) -> RewardModel:
    torch.manual_seed(seed)
    return RewardModel(pack.scenario.layout.n_features, pack.scenario.n_actions, 3, (16,)).eval()


def _rollout(pack: Any, source: RewardSource, model: RewardModel | None) -> tuple[torch.Tensor, ...]:
    from rlops.sandbox.policies import rule_policy

    env = pack.make_env(64, seed=3)
    apply_reward_source(env, source, model)
    totals, bds = [], []
    for _ in range(4):
        _, r, _, _, info = env.step(rule_policy(env))
        totals.append(r)
        bds.append(info.reward_breakdown)
    return torch.stack(totals), torch.stack(bds), env.reward.names


@pytest.mark.parametrize("kind, lam", [("blend", 0.5), ("model", 1.0)])
def test_reward_source_math_on_the_env(pack: Any, kind: str, lam: float) -> None:
    model = _model(pack)
    scripted, sbd, _ = _rollout(pack, RewardSource("scripted"), None)
    got, bd, names = _rollout(pack, RewardSource(kind, lam), model)
    j = names.index(f"hook:{HOOK_NAME}")
    score = bd[..., j] / RewardSource(kind, lam).model_weight  # the hook's raw score
    assert score.abs().sum() > 0
    want = blend_rewards(scripted, score, RewardSource(kind, lam)).clamp(-5.0, 5.0)  # the pack's CLIP
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bd.sum(-1), got, atol=1e-5, rtol=1e-5)  # the breakdown still sums to the total


def test_centred_score_is_the_models_preference_within_the_legal_actions(pack: Any) -> None:
    model = _model(pack)
    env = pack.make_env(16, seed=1)
    env.step(env.action_masks().float().argmax(dim=1))  # past the first step: other legal sets
    feats, masks = env.observe()[:, : pack.scenario.layout.n_features], env.action_masks()
    out, n = torch.rand(16, 3), pack.scenario.n_actions
    with torch.no_grad():
        centred = torch.stack([centred_scores(model, feats, torch.full((16,), a), out, masks) for a in range(n)], 1)
        raw = torch.stack([model(feats, torch.full((16,), a), out) for a in range(n)], 1)
    # nothing on average over a state's legal actions; the model's own differences between actions
    torch.testing.assert_close((centred * masks).sum(dim=1), torch.zeros(16), atol=1e-5, rtol=0)
    torch.testing.assert_close(centred[:, 1] - centred[:, 0], raw[:, 1] - raw[:, 0], atol=1e-5, rtol=1e-5)
    legal_mean = (raw * masks).sum(dim=1) / masks.sum(dim=1)
    torch.testing.assert_close(centred[:, 2], raw[:, 2] - legal_mean, atol=1e-5, rtol=1e-5)
    assert RewardSource("blend").centred and not RewardSource("blend", centred=False).centred


def test_blend_rewards_and_validation() -> None:
    s, m = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 4.0])
    assert blend_rewards(s, m, RewardSource("scripted")).tolist() == [1.0, -2.0]
    assert blend_rewards(s, m, RewardSource("model")).tolist() == [0.5, 4.0]
    assert blend_rewards(s, m, RewardSource("blend", 0.25)).tolist() == [1.125, -1.0]
    with pytest.raises(ValueError, match="expected one of"):
        RewardSource("learned")
    with pytest.raises(ValueError, match=">= 0"):
        RewardSource("blend", -1.0)


def test_select_high_reward_keeps_top_choice_steps() -> None:
    masks = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]], dtype=torch.bool)
    keep, cut = select_high_reward(torch.tensor([0.1, 0.9, 0.5, 5.0]), masks, 0.5)
    assert keep.tolist() == [False, True, True, False] and cut == pytest.approx(0.5)


def _ctx(tmp_path: Path, **over: Any) -> StepContext:
    overrides = {
        "local_dir": str(tmp_path / "local"),
        "label_queue": {"db_url": f"sqlite:///{tmp_path / 'queue.db'}"},
        "train": {"num_envs": 16, "eval_episodes": 64, "checkpoint_every": 1, "bc_epochs": 2},
        "ppo": {"num_steps": 8, "device": "cpu"},
    }
    return StepContext.create(run_key=RUN_KEY, overrides=deep_merge(overrides, over))


def _register_reward_model(ctx: StepContext, model: RewardModel) -> str:
    import tempfile

    from rlops.model.reward_model import save_reward_model
    from rlops.registry.client import reward_model_name

    with ctx.tracker.start_run("rm") as run, tempfile.TemporaryDirectory() as tmp:
        save_reward_model(model, Path(tmp) / "reward_model")
        run.log_artifact(Path(tmp) / "reward_model", "reward_model")
        return ctx.tracker.register_model(run.run_id, "reward_model", reward_model_name(SCENARIO))


@pytest.mark.usefixtures("steps_load_pack")
def test_relabel_then_blend_training_tags_the_reward_model(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, pack: Any
) -> None:
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.relabel import labels_uri, relabel_step
    from rlops.pipeline_steps.training.request import TrainRequest
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    ctx = _ctx(tmp_path, train={"reward_source": "blend", "reward_blend_lambda": 0.5})
    start = datetime(2026, 1, 5, 10, 5, tzinfo=UTC)
    traces = rollout_traces(pack, random_policy(1), 200, seed=0, start_ts=start, policy_version="rules")
    traces["ts"] = [(start + timedelta(seconds=i)).isoformat() for i in range(len(traces))]
    ctx.storage.write_parquet(ctx.traces.scenario_uri(ctx.scenario) + "/date=2026-01-05/hour=10/part-0.parquet", traces)
    version = _register_reward_model(ctx, _model(pack, 1))

    res = relabel_step(ctx)
    assert res.rows_in == res.rows_out == len(traces) and res.reward_model_version == version
    labels = ctx.storage.read_parquet(labels_uri(ctx))
    assert len(labels) == len(traces) and labels["rm_score"].notna().all()
    assert set(zip(labels["episode_id"], labels["step"])) == set(
        zip(traces["episode_id"].astype(str), traces["step"].astype(int))
    )

    out = train_policy(ctx, TrainRequest(timesteps=16 * 8 * 2)).as_dict()
    assert out["reward_source"] == "blend" and out["reward_model_version"] == version
    assert out["behaviour_cloning"]["steps_imitated"] >= 64
    tags = ctx.tracker.model_version_tags(policy_model_name(SCENARIO), out["model_version"])
    assert tags["reward_model_version"] == version and tags["reward_source"] == "blend"
    assert float(tags["reward_blend_lambda"]) == 0.5 and int(tags["bc_steps"]) >= 64


@pytest.mark.usefixtures("steps_load_pack")
def test_model_source_without_a_reward_model_is_a_clear_error(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, pack: Any
) -> None:
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    with pytest.raises(ValueError, match="train one first"):
        train_policy(_ctx(tmp_path), TrainRequest(timesteps=256, reward_source="model"))


def test_warm_start_imitates_human_labels_too(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, pack: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Labels from the queue feed the policy, not only the reward model: with no relabelled traces,
    the warm start clones the labelled actions."""
    from rlops.common.ppo_config import PPOConfig
    from rlops.pipeline_steps.labels.select import queue_items
    from rlops.pipeline_steps.labels.step import store_for
    from rlops.pipeline_steps.training.dual_track import warm_start
    from rlops.pipeline_steps.training.setup import resolve_training
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    ctx = _ctx(tmp_path, train={"bc_top_fraction": 1.0})
    rows = rollout_traces(pack, rule_policy, 100, seed=0)
    rows = (
        rows[rows["action_mask"].str.count("1") >= 2]
        .head(80)
        .assign(cluster_id=0, cluster_entropy=0.9, norm_entropy=0.9)
    )
    store = store_for(ctx, ctx.config.label_queue)
    store.create()
    items = queue_items(pack, "credit_approval", rows.reset_index(drop=True), rows)
    store.enqueue("credit_approval", RUN_KEY, items)
    store.add_labels(
        "credit_approval",
        [
            {
                "item_id": it["item_id"],
                "label": it["action_taken"],
                "annotator": "a",
                "labelled_at": "2026-01-05T10:00:00Z",
            }
            for it in items
        ],
    )
    policy, info = warm_start(ctx, resolve_training(ctx), PPOConfig(seed=0))
    assert policy is not None and info["steps_imitated"] == len(items) and info["accuracy"] > 0.5
