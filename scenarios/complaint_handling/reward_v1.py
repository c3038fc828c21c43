"""Complaint handling reward, v1: compensation is paid when offered, the customer's value is
booked when the case is closed (``settle_on="close_case"``), so the offer that decides a case
pays off several steps later."""

import torch

from rlops.sandbox.reward import component, rule_ref

VERSION_LABEL = "v1"
WEIGHTS = {"cost": 1.0, "retention": 1.0, "efficiency": 1.0}
CLIP = 5.0
REPEAT_PENALTY = {"penalty": 0.2, "after": 1, "rule_ref": "OPS_v2.0_2.3"}

# The business figures, also read by oracle.py.
OFFER_COST = {"offer_apology": 0.0, "offer_voucher": 0.25, "offer_refund": 0.7}
RETAINED = 1.2          # × customer value, for a resolved complaint
LOST = 0.6              # × customer value, for a case that ends unresolved
SUPERVISOR_COST = 1.0
STEP_COST, LATENCY_COST_PER_S = 0.03, 0.05
VALUE_UNIT_CNY = 3000.0

# The constants a business expert may change in a reward what-if (rlops reward whatif --param).
PARAMS = {
    "RETAINED": {
        "range": [0.0, 5.0],
        "rule_ref": "RETENTION_v2.0_1.1",
        "description": "value of a resolved complaint, in customer values",
    },
    "LOST": {
        "range": [0.0, 5.0],
        "rule_ref": "RETENTION_v2.0_1.2",
        "description": "cost of a lost customer, in customer values",
    },
    "SUPERVISOR_COST": {
        "range": [0.0, 5.0],
        "rule_ref": "OPS_v2.0_2.2",
        "description": "cost of a case handed to a supervisor",
    },
}


def customer_value(t):
    return t.s.customer.annual_value / VALUE_UNIT_CNY


@component(objective="cost", reason="compensation offered")
@rule_ref("COMP_POLICY_v1.2_3.1")
def compensation(t):
    cost = torch.zeros_like(t.latency_ms)
    for name, c in OFFER_COST.items():
        cost = torch.where((t.action == name) & ~t.error, torch.full_like(cost, -c), cost)
    return cost


@component(objective="retention", reason="complaint resolved: the customer stays", settle_on="close_case")
@rule_ref("RETENTION_v2.0_1.1")
def retained(t):
    newly = t.ns.hidden.resolved & ~t.s.hidden.resolved
    return torch.where(newly, RETAINED * customer_value(t), 0.0)


@component(objective="retention", reason="case ended unresolved: the customer leaves")
@rule_ref("RETENTION_v2.0_1.2")
def lost(t):
    ended = t.terminated | t.truncated
    return torch.where(ended & ~t.ns.hidden.resolved, -LOST * customer_value(t), 0.0)


@component(objective="efficiency", reason="handling time: per step and per second of latency")
@rule_ref("OPS_SLA_v3.2_4.1")
def handling_time(t):
    return -STEP_COST - LATENCY_COST_PER_S * t.latency_ms / 1000.0


@component(objective="efficiency", reason="case handed to a supervisor")
@rule_ref("OPS_v2.0_2.2")
def supervisor_cost(t):
    return torch.where((t.action == "escalate_to_supervisor") & ~t.error, -SUPERVISOR_COST, 0.0)
