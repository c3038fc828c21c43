"""Sparse outcomes: an episode-level outcome is spread over the steps by per-step scores (credits sum
to the outcome; a bad outcome is blamed on the lowest-scored steps), and the audit report says
where the low scores come from (component / rule / action / state cluster)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.model.credit_assignment import distribute_outcome
from rlops.pipeline_steps.audit.attribution import attribute
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import random_policy
from rlops.sandbox.traces import rollout_traces

REPO = REPO_ROOT


def test_credits_sum_to_the_outcome_and_blame_the_lowest_steps() -> None:
    scores = torch.tensor([0.0, -3.0, 1.0, 2.0, 0.5])
    episode = torch.tensor([0, 0, 0, 1, 1])
    outcome = torch.tensor([-1.0, 2.0])
    credit = distribute_outcome(scores, episode, outcome)
    sums = torch.zeros(2).index_add_(0, episode, credit)
    torch.testing.assert_close(sums, outcome)
    assert int(credit[:3].argmin()) == 1  # the failure lands on the step the model rates worst
    assert int(credit[3:].argmax()) == 0  # the success on the step it rates best
    with pytest.raises(ValueError, match="temperature"):
        distribute_outcome(scores, episode, outcome, temperature=0.0)


def test_attribution_names_component_rule_action_and_cluster() -> None:
    credit = load_pack(REPO / "scenarios" / "credit_approval", check_liveness=False)
    df = rollout_traces(credit, random_policy(2), 300, seed=0)
    # a hidden satisfaction flag at the end: unhappy when the case went to a human underwriter
    escalated = df.groupby("episode_id")["action"].transform(lambda a: (a == "escalate_to_human").any())
    last = df.groupby("episode_id")["step"].transform("max") == df["step"]
    df["outcome"] = np.where(last, np.where(escalated, -1.0, 1.0), np.nan)
    clusters = np.zeros(len(df), dtype=int)
    section = attribute(credit, df, None, clusters, "the scripted reward")
    assert section is not None and section.episodes == df["episode_id"].nunique()
    assert section.low_steps > 0 and section.lines
    top = section.lines[0]
    assert top.sentence.startswith(f"{top.share:.0%} of low scores come from component ")
    assert "/ rule " in top.sentence and "in state cluster 0" in top.sentence
    doc = section.as_dict()  # the report's JSON section
    assert list(doc) == ["episodes", "mean_outcome", "score_source", "low_threshold", "low_steps", "lines"]
    assert list(doc["lines"][0]) == ["share", "component", "rule_ref", "action", "cluster", "sentence"]
    assert attribute(credit, df.drop(columns="outcome"), None, clusters, "x") is None


def test_audit_report_shows_the_attribution(tmp_path: Path, tmp_tracking: str) -> None:
    from rlops.pipeline_steps.audit.report import audit
    from tests.pipeline_steps.audit.test_audit import _ctx, _store

    credit = load_pack(REPO / "scenarios" / "credit_approval", check_liveness=False)
    ctx = _ctx(tmp_path, tmp_tracking)
    df = rollout_traces(
        credit,
        random_policy(0),
        200,
        seed=0,
        policy_version="9",
        start_ts=pd.Timestamp("2026-11-30T04:10:00Z").to_pydatetime(),
    )
    last = df.groupby("episode_id")["step"].transform("max") == df["step"]
    df["outcome"] = np.where(last, np.where(df["reward_total"] < 0, -1.0, 1.0), np.nan)
    _store(ctx, df, "a")
    out = audit(ctx, policy_version="9")
    body = ctx.storage.read_json(out.report_uri)
    assert body["attribution"]["lines"] and body["attribution"]["score_source"].startswith("the scripted reward")
    page = ctx.storage.read_text(out.html_uri)
    assert "Where the low scores come from" in page and "of low scores come from component" in page
