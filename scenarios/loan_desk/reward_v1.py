"""Loan desk reward, v1: a team reward the screener and the underwriter share (the loan's margin
net of its expected credit loss, handling time) plus each role's own rules
(``@component(role=...)``), which score only the steps that role takes."""

import torch

from rlops.sandbox.reward import component, rule_ref

VERSION_LABEL = "v1"
WEIGHTS = {"margin": 1.0, "operations": 1.0, "compliance": 1.0}
CLIP = 5.0

# The business figures.
MARGIN, LOSS_GIVEN_DEFAULT = 0.4, 0.6
REDUCED_TAKE_UP = 0.5   # share of applicants who take a reduced offer
AMOUNT_UNIT_CNY = 10_000.0
STEP_COST = 0.02
INCOMPLETE_FILE_COST = 0.5
REQUEST_COST = 0.05
CAP_SCORE, CAP_INCOMES = 600, 3.0
CAP_COST = 1.0

# The constants a business expert may change in a reward what-if (rlops reward whatif --param).
PARAMS = {
    "INCOMPLETE_FILE_COST": {
        "range": [0.0, 5.0],
        "rule_ref": "SCREENING_v1.0_3.1",
        "description": "cost of a file passed to underwriting with documents missing",
    },
    "REQUEST_COST": {
        "range": [0.0, 1.0],
        "rule_ref": "SCREENING_v1.0_3.2",
        "description": "cost of a document request",
    },
    "CAP_COST": {
        "range": [0.0, 5.0],
        "rule_ref": "UNDERWRITING_v1.0_4.1",
        "description": "cost of an approval over the affordability cap",
    },
}


def default_probability(credit_score, amount, income):
    """The desk's risk model: rises below a score of 600 and past four monthly incomes."""
    return torch.sigmoid((600.0 - credit_score) / 40.0 + 0.5 * (amount / income - 4.0))


@component(objective="margin", reason="loan approved: margin net of the expected credit loss")
@rule_ref("DESK_MARGIN_v1.0_1.1")
def loan_margin(t):
    approved = t.action.isin(["approve", "approve_reduced"]) & ~t.error
    amount = t.ns.decision.approved_amount
    p = default_probability(t.s.applicant.credit_score, amount, t.s.applicant.income_monthly)
    value = amount / AMOUNT_UNIT_CNY * (MARGIN * (1 - p) - LOSS_GIVEN_DEFAULT * p)
    take_up = torch.where(t.action == "approve_reduced", REDUCED_TAKE_UP, 1.0)
    return torch.where(approved, take_up * value, 0.0)


@component(objective="operations", reason="handling time of the desk")
@rule_ref("DESK_OPS_v1.0_2.1")
def handling_time(t):
    return torch.full_like(t.latency_ms, -STEP_COST)


@component(objective="compliance", reason="file passed to underwriting with documents missing", role="screener")
@rule_ref("SCREENING_v1.0_3.1")
def incomplete_file(t):
    passed = (t.action == "pass_to_underwriting") & ~t.error
    return torch.where(passed & ~t.s.applicant.documents_complete, -INCOMPLETE_FILE_COST, 0.0)


@component(objective="operations", reason="documents requested from the applicant", role="screener")
@rule_ref("SCREENING_v1.0_3.2")
def document_request(t):
    return torch.where(t.action == "request_documents", -REQUEST_COST, 0.0)


@component(objective="compliance", reason="approved over three monthly incomes below a credit score of 600",
           role="underwriter")
@rule_ref("UNDERWRITING_v1.0_4.1")
def affordability_cap(t):
    approved = t.action.isin(["approve", "approve_reduced"]) & ~t.error
    over = t.ns.decision.approved_amount > CAP_INCOMES * t.s.applicant.income_monthly
    return torch.where(approved & over & (t.s.applicant.credit_score < CAP_SCORE), -CAP_COST, 0.0)
