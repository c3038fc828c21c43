"""Fixtures of the ``rlops init`` tests: a trace file of the credit pack's live profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlops.common.config import REPO_ROOT

CREDIT = REPO_ROOT / "scenarios" / "credit_approval"
EPISODES = 1500


@pytest.fixture(scope="session")
def credit_live_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The credit pack's rule engine on 1,500 episodes of its live profile, as the trace store
    holds them (a parquet file, one row per step, reward breakdowns included)."""
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(CREDIT)
    df = rollout_traces(pack, rule_policy, episodes=EPISODES, seed=0, profile="live", source="live")
    path = tmp_path_factory.mktemp("traces") / "credit_live.parquet"
    df.to_parquet(path)
    return path
