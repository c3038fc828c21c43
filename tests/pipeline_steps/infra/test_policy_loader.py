"""The policy a capture or a drift check traces with: the champion, else the rule engine — and when
the registry cannot be read, the rule engine with the reason, which the capture's result reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlops.pipeline_steps.infra import policy_loader
from rlops.pipeline_steps.infra.context import StepContext
from rlops.sandbox.policies import rule_policy


def test_no_champion_traces_the_rule_engine_without_a_warning(tmp_tracking: str, tmp_storage_root: str) -> None:
    ctx = StepContext.create("credit_approval", "20261130T0500")
    traced = policy_loader.champion_trace_policy(ctx, ctx.load_pack(), ctx.config.seed)
    assert (traced.policy, traced.version, traced.warning) == (rule_policy, "rules", None)


def test_a_registry_outage_traces_the_rule_engine_and_says_why(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step

    def outage(ctx: Any, dst: Path) -> Any:
        raise ConnectionError("tracking server refused the connection")

    monkeypatch.setattr(policy_loader, "champion_policy", outage)
    ctx = StepContext.create("credit_approval", "20261130T0500", overrides={"capture": {"episodes": 5}})
    traced = policy_loader.champion_trace_policy(ctx, ctx.load_pack(), ctx.config.seed)
    assert traced.version == "rules" and traced.policy is rule_policy
    assert traced.warning == "champion unavailable (tracking server refused the connection); traced the rule engine"
    out = capture_step(ctx, CaptureRequest(simulate=True)).as_dict()
    assert out["policy_version"] == "rules" and out["warnings"] == [traced.warning]
