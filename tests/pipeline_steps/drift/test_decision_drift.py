"""Two trace windows served by different logging policies differ first in what was decided and
what it earned: ``rlops drift detect`` tests the action taken and the reward by default, and two
windows of one policy do not drift there."""

from __future__ import annotations

import pytest

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.drift.stats import detect_drift


@pytest.fixture(scope="module")
def windows():  # type: ignore[no-untyped-def]
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy, rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)

    def roll(act, seed: int):  # type: ignore[no-untyped-def]
        return rollout_traces(pack, act, 800, seed=seed, profile="live", source="live")

    return roll(rule_policy, 0), roll(rule_policy, 1), roll(random_policy(2), 2)


def _verdicts(baseline, target, decisions: bool) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    clusters = (baseline["episode_id"], target["episode_id"])
    report = detect_drift(baseline, target, bh=True, clusters=clusters, decisions=decisions, workers=1)
    return {f.field: f.drifted for f in report.fields}


def test_another_logging_policy_drifts_in_its_actions_and_rewards(windows) -> None:  # type: ignore[no-untyped-def]
    rules, _, random = windows
    verdicts = _verdicts(rules, random, decisions=True)
    assert verdicts["action"] and verdicts["reward_total"]
    assert "action" not in _verdicts(rules, random, decisions=False)  # the drift check's defaults: states only


def test_the_same_policy_on_other_traffic_does_not(windows) -> None:  # type: ignore[no-untyped-def]
    rules, rules_again, _ = windows
    verdicts = _verdicts(rules, rules_again, decisions=True)
    assert not verdicts["action"] and not verdicts["reward_total"]
