"""The reward model on credit-pack preference pairs: held-out pairwise accuracy, rank correlation
with the true expected reward, the regression option, batch scoring and save/load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.model.reward_model import (
    PreferencePairs,
    RewardModelConfig,
    bradley_terry_loss,
    load_reward_model,
    pairwise_accuracy,
    save_reward_model,
    score,
    spearman,
    train_reward_model,
)
from rlops.model.reward_pairs import (
    build_preference_pairs,
    collect_reward_dataset,
    latent_columns,
    resolve_continuation,
    rule_continuation,
)
from rlops.sandbox.pack import load_pack

PACK = REPO_ROOT / "scenarios" / "credit_approval"
DECISIONS = {"approve", "approve_reduced", "reject"}


@pytest.fixture(scope="module")
def pack() -> Any:
    return load_pack(PACK)


@pytest.fixture(scope="module")
def pairs(pack: Any) -> PreferencePairs:
    # True expected reward = expected return-to-go of the action followed by the pack's oracle
    # (continuation "auto": the credit pack ships oracle.py).
    return build_preference_pairs(pack, 5000, seed=0, reward_fn="v1", profile="sandbox")


@pytest.fixture(scope="module")
def trained(pairs: PreferencePairs) -> tuple[Any, Any]:
    return train_reward_model(RewardModelConfig(seed=0), pairs)


def test_pairs_prefer_the_action_with_the_higher_expected_reward(pack: Any, pairs: PreferencePairs) -> None:
    assert len(pairs) == 5000
    assert (pairs.chosen_value - pairs.rejected_value >= 0.02).all()
    assert (pairs.chosen != pairs.rejected).all()
    assert pairs.states.shape[1] == pack.scenario.layout.n_features
    names = pack.scenario.action_names
    kinds = {(names[int(c)], names[int(r)]) for c, r in zip(pairs.chosen, pairs.rejected)}
    # Decisions are compared with each other, not only "keep going" against "escalate".
    assert {("approve", "reject"), ("reject", "approve"), ("approve_reduced", "approve")} <= kinds
    assert [pack.scenario.columns["hidden.default_u"]] == [c for c, _, _ in latent_columns(pack.scenario)]


def test_reward_model_reaches_90_percent_held_out_pairwise_accuracy(
    pack: Any, pairs: PreferencePairs, trained: tuple[Any, Any]
) -> None:
    model, metrics = trained
    assert metrics.n_heldout == 1000 and metrics.n_train == 4000
    assert metrics.heldout_pairwise_accuracy >= 0.9
    assert metrics.spearman > 0.5
    # The harder subset, decision against decision, is learnt too (not only the easy pairs).
    names = pack.scenario.action_names
    held = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(0))[: metrics.n_heldout]
    dec = torch.tensor(
        [names[int(pairs.chosen[i])] in DECISIONS and names[int(pairs.rejected[i])] in DECISIONS for i in held]
    )
    assert int(dec.sum()) > 100
    assert pairwise_accuracy(model, pairs.subset(held[dec])) >= 0.8


def test_score_labels_batches_and_survives_save_and_load(
    trained: tuple[Any, Any], pairs: PreferencePairs, tmp_path: Path
) -> None:
    model, _ = trained
    s = score(model, pairs.states, pairs.chosen, pairs.chosen_outcomes, batch_size=777)
    assert s.shape == (len(pairs),) and torch.isfinite(s).all()
    save_reward_model(model, tmp_path / "rm", metadata={"pairs": len(pairs)})
    loaded = load_reward_model(tmp_path / "rm")
    assert torch.equal(score(loaded, pairs.states, pairs.chosen, pairs.chosen_outcomes, batch_size=777), s)
    assert torch.allclose(score(loaded, pairs.states, pairs.chosen, pairs.chosen_outcomes), s, atol=1e-5)
    with pytest.raises(ValueError, match="outcomes"):
        loaded(pairs.states, pairs.chosen)


def test_regression_on_observed_reward_totals(pack: Any) -> None:
    data = collect_reward_dataset(pack, 3000, seed=1, reward_fn="v1", profile="sandbox")
    model, metrics = train_reward_model(RewardModelConfig(loss="regression", epochs=30, seed=0), data)
    assert metrics.n_train + metrics.n_heldout == len(data)
    assert metrics.spearman > 0.5 and metrics.heldout_pairwise_accuracy > 0.7
    baseline = float(((data.rewards - data.rewards.mean()) ** 2).mean())
    assert metrics.heldout_loss < 0.8 * baseline


def test_bradley_terry_loss_and_rank_correlation() -> None:
    rc, rr = torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0])
    expected = -(torch.nn.functional.logsigmoid(torch.tensor([1.5, -0.5]))).mean()
    assert bradley_terry_loss(rc, rr, margin=0.5).item() == pytest.approx(expected.item())
    assert bradley_terry_loss(rc, rr, center_coef=1.0).item() == pytest.approx(bradley_terry_loss(rc, rr).item() + 2.0)
    assert spearman(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([10.0, 20.0, 25.0, 100.0])) == pytest.approx(1.0)
    assert spearman(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([3.0, 2.0, 1.0])) == pytest.approx(-1.0)
    assert spearman(torch.tensor([1.0, 1.0, 2.0]), torch.tensor([1.0, 1.0, 2.0])) == pytest.approx(1.0)


def test_wrong_data_for_the_loss_is_rejected(pack: Any) -> None:
    data = collect_reward_dataset(pack, 50, seed=2, reward_fn="v1", profile="sandbox")
    with pytest.raises(TypeError, match="PreferencePairs"):
        train_reward_model(RewardModelConfig(), data)
    with pytest.raises(ValueError, match="loss"):
        RewardModelConfig(loss="hinge")
    with pytest.raises(ValueError, match="unknown reward_model settings"):
        RewardModelConfig.from_params({"epochs": 3, "lr": 0.1})
    assert resolve_continuation(pack, "rules") is rule_continuation
    assert resolve_continuation(pack, "auto") is not rule_continuation  # the pack's oracle
    with pytest.raises(ValueError, match="continuation"):
        resolve_continuation(pack, "greedy")
