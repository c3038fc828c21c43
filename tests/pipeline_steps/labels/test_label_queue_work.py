"""A label queue that yields work: the top-k most uncertain clusters are queued even when none
clears the threshold (a trained, confident policy); a rule-engine-only window is scored with the
newest candidate's entropy before any champion exists, and says so; excluded rows are counted with
their reasons; the labeller sees rounded values with units."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from rlops.common.config import REPO_ROOT, load_params
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.labels.request import LabelQueueRequest
from rlops.pipeline_steps.labels.select import display_value, select_uncertain
from rlops.pipeline_steps.labels.step import QueueConfig, label_queue_export, label_queue_run
from rlops.pipeline_steps.labels.uncertainty import EXCLUDED_RULE_ENGINE, EXCLUDED_SCENARIO, EXCLUDED_SINGLE
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import random_policy, rule_policy
from rlops.sandbox.traces import rollout_traces

REPO = REPO_ROOT
T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(REPO / "scenarios" / "credit_approval", check_liveness=False)


def _traces(pack: Pack, policy: Any, version: str, entropy_share: float | None) -> pd.DataFrame:
    df = rollout_traces(pack, policy, 400, seed=0, start_ts=T0 - timedelta(minutes=50), policy_version=version)
    df["ts"] = [(T0 - timedelta(minutes=50) + timedelta(seconds=i)).isoformat() for i in range(len(df))]
    if entropy_share is not None:
        rng = np.random.default_rng(0)
        df["entropy"] = rng.uniform(0.0, entropy_share, len(df)) * np.log(
            df["action_mask"].str.count("1").clip(lower=2)
        )
    return df


def test_top_k_queues_a_confident_policys_least_certain_clusters(credit: Pack) -> None:
    df = _traces(credit, random_policy(0), "3", 0.45)  # every cluster far below 0.8
    none, stats = select_uncertain(credit, df, QueueConfig(clusters=8, top_k=0, min_cluster_states=5))
    assert none.empty and not any(s.selected for s in stats)
    picked, stats = select_uncertain(credit, df, QueueConfig(clusters=8, min_cluster_states=5))  # default top_k
    chosen = [s for s in stats if s.selected]
    assert len(chosen) == 2 and {s.why for s in chosen} == {"top_k"}
    judged = [s for s in stats if s.why != "too few states"]
    assert min(s.mean_entropy for s in chosen) >= max(s.mean_entropy for s in judged if not s.selected)
    assert set(picked["cluster_id"]) == {s.cluster_id for s in chosen} and len(picked) > 0


def _ctx(tmp_path: Path) -> StepContext:
    params = load_params(
        overrides={
            "storage": {"root": f"file://{tmp_path / 'storage'}"},
            "label_queue": {"db_url": f"sqlite:///{tmp_path / 'q.db'}", "clusters": 8},
        }
    )
    return StepContext.create("credit_approval", "20261130T0400", params=params)


def test_before_any_champion_the_newest_candidate_scores_rule_engine_traffic(
    tmp_tracking: str, tmp_path: Path, credit: Pack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlops.registry.client import policy_model_name

    monkeypatch.setattr(StepContext, "pack_with", lambda self, calibration: credit)
    ctx = _ctx(tmp_path)
    df = _traces(credit, rule_policy, "rules", None)
    other = df.head(5).assign(scenario="claims")
    ctx.storage.write_parquet(
        ctx.uri("traces", "scenario=credit_approval", "date=2026-11-30", "hour=04", "part-0.parquet"),
        pd.concat([df, other], ignore_index=True),
    )
    # no policy registered: nothing to measure, and the result says why
    res = label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces"))).as_dict()
    assert res["items"] == 0 and res["rows_excluded"][EXCLUDED_RULE_ENGINE] == len(df)
    assert res["rows_excluded"][EXCLUDED_SCENARIO] == 5 and res["uncertainty_from"].startswith("none")

    # a candidate (untrained: uncertain) is registered, no champion yet
    from rlops.model.policy import PolicyConfig, PolicyNetwork
    from rlops.pipeline_steps.training.candidate import register_policy

    torch.manual_seed(0)
    policy = PolicyNetwork(PolicyConfig.from_layout(credit.scenario.layout))
    with ctx.tracker.start_run("candidate") as run:
        version = register_policy(ctx, run, credit, policy, {"mode": "full"}, tmp_path)
    res = label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces"))).as_dict()
    assert (
        res["uncertainty_from"]
        == f"latest candidate {policy_model_name('credit_approval')} v{version} (no champion yet)"
    )
    assert res["items"] > 0 and EXCLUDED_RULE_ENGINE not in res["rows_excluded"]
    assert res["rows_excluded"][EXCLUDED_SINGLE] > 0 and res["rows_judged"] > 0

    # what the labeller reads: rounded, with units
    exported = label_queue_export(ctx).as_dict()
    text = ctx.storage.read_json(exported["tasks_uri"])[0]["data"]["state_text"]
    assert " CNY" in text and " years" in text
    income = next(line for line in text.splitlines() if line.startswith("user_profile.income_monthly"))
    assert len(income.split(": ")[1].split(" ")[0].split(".")[-1]) <= 2


def test_display_value_rounds_with_units(credit: Pack) -> None:
    assert display_value(credit, "user_profile.income_monthly", 6415.46337890625) == "6,415.46 CNY"
    assert display_value(credit, "user_profile.age", 41.0) == "41 years"
    assert display_value(credit, "user_profile.debt_ratio", 0.3456789) == "0.346"
    assert display_value(credit, "system_status.fraud_check_done", True) == "yes"
    assert display_value(credit, "user_profile.credit_score", None) == "—"
    assert display_value(credit, "user_profile.employment", "retired") == "retired"
