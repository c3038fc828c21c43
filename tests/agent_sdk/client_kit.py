"""Shared by the policy-client tests: the credit pack, a production state, and registered versions
whose greedy choice on that state tells them apart."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rlops.common.config import REPO_ROOT
from rlops.common.policy_ref import policy_model_name
from rlops.pipeline_steps.infra.context import StepContext
from tests.policy_kit import preference_policy

SCENARIO = "credit_approval"
NAME = policy_model_name(SCENARIO)
PACK_DIR = REPO_ROOT / "scenarios" / SCENARIO
STATE = {
    "user_profile": {"age": 30, "income_monthly": 9000.0, "employment": "salaried", "region": "guangdong"},
    "application": {"loan_amount": 30000.0, "purpose": "car", "term_months": 12},
    "system_status": {"fraud_check_done": False, "credit_report_fetched": False},
    "decision": {"approval_result": "pending", "approved_amount": 0.0, "notified": False},
}
#: What each registered test policy chooses first on ``STATE``.
CREDIT_FIRST = {"fetch_credit_report": 3, "initiate_fraud_check": 2}
FRAUD_FIRST = {"initiate_fraud_check": 3, "fetch_credit_report": 2}


def register(pack: Any, policy: Any, **tags: Any) -> str:
    from rlops.pipeline_steps.training.candidate import register_policy

    ctx = StepContext.create(run_key="20260105T1000")
    with ctx.tracker.start_run("test-policy") as run, tempfile.TemporaryDirectory() as tmp:
        return register_policy(ctx, run, pack, policy, {"mode": "full", **tags}, Path(tmp))


def register_pair(pack: Any) -> tuple[str, str]:
    """v1 prefers the credit report first, v2 the fraud check."""
    return (register(pack, preference_policy(pack, CREDIT_FIRST)), register(pack, preference_policy(pack, FRAUD_FIRST)))


def tracker() -> Any:
    return StepContext.create(run_key="20260105T1000").tracker
