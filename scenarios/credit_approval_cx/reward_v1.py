"""Credit approval reward, v1: the amount cap is 3 monthly incomes below a credit score of 550
(CREDIT_POLICY_v2.1_3.4), 5 otherwise. Fixes reward_v0, which applied 5 to everyone."""

import torch

from rlops.sandbox.reward import component, rule_ref

VERSION_LABEL = "v1"
WEIGHTS = {"compliance": 1.0, "risk": 1.0, "service": 1.0, "efficiency": 1.0}
CLIP = 5.0
REPEAT_PENALTY = {"penalty": 0.2, "after": 2, "rule_ref": "OPS_v2.0_2.3"}

DECISIONS = ["approve", "approve_reduced", "reject"]
APPROVALS = ["approve", "approve_reduced"]
HUMAN_COST = 0.3  # cost of handing a case to a human underwriter

# The constants a business expert may change in a reward what-if (rlops reward whatif --param).
PARAMS = {
    "HUMAN_COST": {
        "range": [0.0, 2.0],
        "rule_ref": "OPS_v2.0_2.2",
        "description": "cost of a case handed to a human underwriter",
    },
}


def cap_multiple(t):
    return torch.where(t.s.user_profile.credit_score < 550, 3.0, 5.0)


@component(objective="compliance", reason="decision made after fraud check and credit report")
@rule_ref("CREDIT_POLICY_v2.1_2.1")
def due_diligence(t):
    checked = t.s.system_status.fraud_check_done & t.s.system_status.credit_report_fetched
    return torch.where(t.action.isin(DECISIONS) & checked, 0.5, 0.0)


@component(objective="compliance", reason="approved amount against the income cap")
@rule_ref("CREDIT_POLICY_v2.1_3.4")
def amount_cap(t):
    within = t.ns.decision.approved_amount <= t.s.user_profile.income_monthly * cap_multiple(t)
    return torch.where(t.action.isin(APPROVALS), torch.where(within, 0.3, -0.4), 0.0)


@component(objective="compliance", reason="rejection rests on a listed reason")
@rule_ref("CREDIT_POLICY_v2.1_3.7")
def rejection_reason(t):
    p = t.s.user_profile
    listed = (p.credit_score < 550) | (p.debt_ratio > 0.6) | t.s.system_status.fraud_flag
    return torch.where((t.action == "reject") & listed, 0.2, 0.0)


@component(objective="risk", reason="loan outcome: margin earned, default or fraud loss",
           settle_on="send_notification")
@rule_ref("RISK_v1.3_5.2")
def loan_outcome(t):
    share = t.ns.decision.approved_amount / t.s.application.loan_amount
    outcome = torch.where(t.s.hidden.is_fraud, -4.0,
                          torch.where(t.ns.hidden.defaulted, -2.5, 1.0))
    return torch.where(t.action.isin(APPROVALS), share * outcome, 0.0)


@component(objective="risk", reason="rejected an applicant who would have repaid",
           settle_on="send_notification")
@rule_ref("CX_v1.0_1.2")
def lost_business(t):
    would_repay = ~t.s.hidden.is_fraud & (t.s.hidden.default_u >= t.s.hidden.default_prob)
    return torch.where((t.action == "reject") & would_repay, -0.2, 0.0)


@component(objective="service", reason="applicant notified of the decision")
@rule_ref("CX_v1.0_1.1")
def notified(t):
    return torch.where((t.action == "send_notification") & ~t.error, 0.1, 0.0)


@component(objective="efficiency", reason="handling time: per step and per second of latency")
@rule_ref("OPS_SLA_v3.2_4.1")
def handling_time(t):
    return -0.03 - 0.05 * t.latency_ms / 1000.0


@component(objective="efficiency", reason="case handed to a human underwriter")
@rule_ref("OPS_v2.0_2.2")
def human_cost(t):
    return torch.where(t.action == "escalate_to_human", -HUMAN_COST, 0.0)
