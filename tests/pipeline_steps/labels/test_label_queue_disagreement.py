"""Reward-ensemble selection of the label queue: the BALD disagreement on hand-made choice
distributions, the batch (most disagreeing states, spread over clusters, then a draw in proportion to disagreement), the
ensemble pointing at states the labels do not decide, and ``labels run`` switching from policy
entropy to the ensemble once labels are finished, never queueing a state twice."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from rlops.common.config import REPO_ROOT, load_params
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.labels.disagreement import (
    DISAGREEMENT,
    SAMPLED,
    LabelledStates,
    ensemble_disagreement,
    fill_budget,
    select_disagreeing,
)
from rlops.pipeline_steps.labels.request import LabelQueueRequest
from rlops.pipeline_steps.labels.step import QueueConfig, label_queue_export, label_queue_import, label_queue_run
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import rule_policy
from rlops.sandbox.traces import rollout_traces
from rlops.trace_store.states import observations_from_traces

REPO = REPO_ROOT
T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Small networks: on a shared machine more torch threads only wait on each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(REPO / "scenarios" / "credit_approval", check_liveness=False)


def test_disagreement_is_high_only_where_members_are_sure_of_different_actions() -> None:
    masks = torch.tensor([[True, True, False]] * 4 + [[True, False, False]])
    a, b = [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]
    half = [0.5, 0.5, 0.0]
    probs = torch.tensor(
        [
            [a, a, half, [0.9, 0.1, 0.0], a],  # member 1
            [a, b, half, [0.1, 0.9, 0.0], a],
        ]
    )  # member 2
    got = ensemble_disagreement(probs, masks)
    # agree → 0; sure of different actions → log 2 nats (all a label can tell); both unsure alike
    # → 0 (a label would not tell them apart); 0.9/0.1 against 0.1/0.9 → H(0.5) − H(0.9); one legal action → 0
    h = lambda p: -sum(x * math.log(x) for x in p if x > 0)  # noqa: E731
    want = [0.0, math.log(2), 0.0, h([0.5, 0.5]) - h([0.9, 0.1]), 0.0]
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert ensemble_disagreement(probs[:1], masks).tolist() == [0.0] * 5  # one member cannot disagree


def test_batch_takes_the_most_disagreeing_states_spread_over_clusters_then_a_proportional_draw() -> None:
    score = np.array([0.9, 0.8, 0.7, 0.1, 0.0, 0.05])
    clusters = np.array([0, 0, 0, 1, 1, 2])
    order, why = fill_budget(score, clusters, budget=4, sample_fraction=0.5, spread_clusters=2, seed=0)
    # half the budget (2) by disagreement, at most ceil(2 / 2) = 1 per cluster: state 0 (cluster 0),
    # then 1 and 2 are skipped (cluster 0 is full) and 3 (cluster 1) is taken
    assert order[:2].tolist() == [0, 3] and why[:2].tolist() == [DISAGREEMENT] * 2
    assert why[2:].tolist() == [SAMPLED] * 2 and set(order[2:].tolist()) <= {1, 2, 4, 5}
    assert len(set(order.tolist())) == 4
    greedy, why = fill_budget(score, clusters, budget=3, sample_fraction=0.0, spread_clusters=1, seed=0)
    assert greedy.tolist() == [0, 1, 2] and set(why) == {DISAGREEMENT}
    # drawn in proportion to disagreement: states without any are left while others remain
    drawn, why = fill_budget(
        np.array([0.0, 0.5, 0.0, 0.2, 0.0, 0.9]), clusters, budget=3, sample_fraction=1.0, spread_clusters=2, seed=3
    )
    assert sorted(drawn.tolist()) == [1, 3, 5] and set(why) == {SAMPLED}
    everything, _ = fill_budget(score, clusters, budget=10, sample_fraction=0.5, spread_clusters=2, seed=0)
    assert sorted(everything.tolist()) == list(range(6))  # a budget above the pool takes the pool


def _traces(pack: Pack, episodes: int, seed: int) -> pd.DataFrame:
    df = rollout_traces(pack, rule_policy, episodes, seed=seed, start_ts=T0 - timedelta(minutes=50), policy_version="3")
    df["ts"] = [(T0 - timedelta(minutes=50) + timedelta(seconds=i)).isoformat() for i in range(len(df))]
    df["entropy"] = 0.1 * np.log(df["action_mask"].str.count("1").clip(lower=2))
    return df


def test_the_ensemble_points_at_states_the_labels_do_not_decide(credit: Pack) -> None:
    df = _traces(credit, 300, seed=0)
    # Labels so far: only first steps, all answered "fraud check first" (what the traces did).
    first = df[df["step"] == 0].head(60).reset_index(drop=True)
    obs, masks = observations_from_traces(credit, first)
    names = list(credit.scenario.action_names)
    labelled = LabelledStates(obs, masks, torch.full((len(first),), names.index("initiate_fraud_check")))
    decision = df["action_mask"].str[names.index("approve")] == "1"
    candidates = pd.concat([df[df["step"] == 0].iloc[60:160], df[decision].head(100)], ignore_index=True)
    cfg = QueueConfig(
        clusters=4, max_items=40, sample_fraction=0.0, spread_clusters=1, ensemble_members=4, ensemble_epochs=40, seed=1
    )
    picked, stats = select_disagreeing(credit, candidates, labelled, cfg)
    assert len(picked) == 40 and set(picked["why"]) == {DISAGREEMENT}
    is_decision = picked["action_mask"].str[names.index("approve")] == "1"
    assert is_decision.mean() >= 0.9  # the unlabelled decisions, not more of the settled first step
    at_first = picked.loc[~is_decision, "disagreement"]
    assert at_first.empty or at_first.max() <= picked.loc[is_decision, "disagreement"].max()
    assert sum(s.states for s in stats) == len(candidates) and any(s.selected for s in stats)
    assert all(s.mean_disagreement is not None for s in stats)


def test_labels_run_switches_to_the_ensemble_once_labels_are_finished(
    tmp_path: Path, credit: Pack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(StepContext, "pack_with", lambda self, calibration: credit)
    params = load_params(
        overrides={
            "storage": {"root": f"file://{tmp_path / 'storage'}"},
            "label_queue": {
                "db_url": f"sqlite:///{tmp_path / 'q.db'}",
                "clusters": 8,
                "top_k": 2,
                "states_per_cluster": 15,
                "min_cluster_states": 5,
                "max_items": 30,
                "ensemble_min_labels": 20,
                "ensemble_members": 3,
                "ensemble_epochs": 30,
            },
        }
    )
    ctx = StepContext.create("credit_approval", "20261130T0400", params=params)
    ctx.storage.write_parquet(
        ctx.uri("traces", "scenario=credit_approval", "date=2026-11-30", "hour=04", "part-0.parquet"),
        _traces(credit, 200, seed=2),
    )
    first = label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces"))).as_dict()
    assert first["selection"].startswith("entropy: 0 finished label(s)") and first["items"] == 30
    tasks = ctx.storage.read_json(label_queue_export(ctx).as_dict()["tasks_uri"])
    for t in tasks:  # the labeller answers with the first legal action
        t["annotations"] = [
            {
                "id": 1,
                "created_at": "2026-11-30T07:00:00Z",
                "result": [
                    {
                        "from_name": "action",
                        "to_name": "state",
                        "type": "choices",
                        "value": {"choices": [t["data"]["candidate_actions"][0]]},
                    }
                ],
            }
        ]
    ctx.storage.write_json(ctx.uri("label_studio", "export.json"), tasks)
    assert label_queue_import(ctx, ctx.uri("label_studio", "export.json")).as_dict()["ingested"] == 30

    later = StepContext.create("credit_approval", "20261130T0500", params=params)
    second = label_queue_run(later, LabelQueueRequest(traces=ctx.uri("traces"))).as_dict()
    assert second["selection"].startswith("reward_ensemble: disagreement of 3 reward models fitted on 30")
    assert second["items"] == 30 and second["inserted"] == 30  # nothing queued twice
    assert second["rows_excluded"]["already queued or labelled"] == 30
    assert second["items_by_reason"] == {DISAGREEMENT: 15, SAMPLED: 15}
    with pytest.raises(ValueError, match="selection"):
        QueueConfig(selection="entropy_and_more")
