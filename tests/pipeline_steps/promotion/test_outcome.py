"""The JSON of a promotion's or a rollback's outcome (``rlops model promote | rollback --json``, the
promotion tasks' XCom, the webhook receiver's answer) keeps the keys it has always had: a key
appears where it applies, and only there."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rlops.pipeline_steps.promotion.outcome import PromotionOutcome, PromotionStatus

PROMOTION_KEYS = ["scenario", "candidate", "staged", "promoted", "action", "dry_run"]
VERDICT_KEYS = ["passed", "failed_gates", "baseline", "report_uri", "eval_run_id"]
GATES = [{"gate": "mean_return", "candidate": 1.0, "champion": 0.5, "threshold": ">= +0", "passed": True}]


def _judged(status: PromotionStatus, **more: Any) -> PromotionOutcome:
    return PromotionOutcome(
        status,
        "credit_approval",
        "why",
        False,
        "7",
        staged=True,
        passed=status is not PromotionStatus.REFUSED,
        failed_gates=[] if status is not PromotionStatus.REFUSED else ["mean_return"],
        baseline="champion v6",
        report_uri=None,
        eval_run_id=None,
        gates=GATES,
        **more,
    )


def test_an_outcome_is_frozen() -> None:
    res = PromotionOutcome(PromotionStatus.BUSY, "credit_approval", "lock held", False, "7")
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.reason = "changed"  # type: ignore[misc]  # what a frozen record refuses


def test_a_promotion_that_never_evaluated_has_no_verdict_keys() -> None:
    busy = PromotionOutcome(PromotionStatus.BUSY, "credit_approval", "lock held", False, "7")
    assert list(busy.as_dict()) == [*PROMOTION_KEYS, "reason"]
    assert busy.as_dict() == {
        "scenario": "credit_approval",
        "candidate": "7",
        "staged": False,
        "promoted": False,
        "action": "none",
        "dry_run": False,
        "reason": "lock held",
    }
    assert (busy.promoted, busy.action, busy.outcome) == (False, "none", "rejected")


def test_an_evaluated_promotion_carries_its_verdict_and_only_the_keys_of_what_moved() -> None:
    refused = _judged(PromotionStatus.REFUSED, lock_wait_s=0.0)
    assert list(refused.as_dict()) == [*PROMOTION_KEYS, *VERDICT_KEYS, "gates", "reason", "lock_wait_s"]
    assert refused.as_dict()["report_uri"] is None and refused.as_dict()["failed_gates"] == ["mean_return"]

    staged = _judged(PromotionStatus.STAGED, traffic_fraction=0.05, champion=None, champion_in_min=120.0)
    out = staged.as_dict()
    assert (out["action"], out["promoted"], out["traffic_fraction"], out["champion_in_min"]) == (
        "challenger",
        False,
        0.05,
        120.0,
    )
    assert "champion" in out and out["champion"] is None  # staged beside no champion: the rule engine
    assert "previous" not in out and "traffic_segment" not in out

    segment = _judged(PromotionStatus.WOULD_STAGE, traffic_fraction=1.0, traffic_segment="guangdong")
    assert segment.as_dict()["traffic_segment"] == "guangdong" and "champion" not in segment.as_dict()
    assert "champion_in_min" not in segment.as_dict() and segment.action == "would_stage"

    champion = _judged(PromotionStatus.CHAMPION, traffic_fraction=1.0, champion="7", previous=None)
    out = champion.as_dict()
    assert out["promoted"] is True and out["action"] == "champion" and (out["champion"], out["previous"]) == ("7", None)
    assert "champion_in_min" not in out and "warning" not in out


def test_a_requested_promotion_names_its_requester_and_leaves_out_the_gate_table() -> None:
    res = dataclasses.replace(_judged(PromotionStatus.REFUSED), gates=None, requested_by="mlflow-ui-alias")
    out = res.as_dict()
    assert "gates" not in out and out["failed_gates"] == ["mean_return"]
    assert list(out)[-3:] == ["outcome", "version", "requested_by"]
    assert (out["outcome"], out["version"], out["requested_by"]) == ("rejected", "7", "mlflow-ui-alias")
    moved = dataclasses.replace(res, status=PromotionStatus.STAGED, traffic_fraction=0.05, champion="6")
    assert moved.outcome == moved.as_dict()["outcome"] == "challenger"


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_rollback_has_the_keys_of_a_rollback(dry_run: bool) -> None:
    if dry_run:
        res = PromotionOutcome(
            PromotionStatus.WOULD_ROLL_BACK, "credit_approval", "dry run", True, champion="2", would_restore="1"
        )
        expected = {"scenario": "credit_approval", "dry_run": True, "champion": "2", "would_restore": "1"}
    else:
        res = PromotionOutcome(
            PromotionStatus.ROLLED_BACK,
            "credit_approval",
            "live return fell",
            False,
            champion="1",
            previous=None,
            rolled_back_from="2",
        )
        expected = {
            "scenario": "credit_approval",
            "dry_run": False,
            "rolled_back_from": "2",
            "champion": "1",
            "previous": None,
        }
    assert res.as_dict() == {**expected, "reason": res.reason}
    assert res.candidate is None and not res.promoted
