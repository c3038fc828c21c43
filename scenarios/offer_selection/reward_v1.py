"""Offer selection reward, v1: one click is worth 1.0, and showing a discount draws a little from
the discount budget, so the reward of a visit is almost always 0 and about one visit in 200 earns
a click."""

import torch

from rlops.sandbox.reward import component, rule_ref

VERSION_LABEL = "v1"
WEIGHTS = {"engagement": 1.0, "cost": 1.0}
CLIP = 2.0

CATEGORIES = ["electronics", "fashion", "home", "grocery", "travel", "beauty", "sports", "books"]
# Offers 1-4 of each category are budget offers, 5-7 standard, 8-10 premium (scenario.yaml).
TIERS = {"budget": range(1, 5), "standard": range(5, 8), "premium": range(8, 11)}
OFFERS_BY_TIER = {tier: [f"offer_{c}_{k}" for c in CATEGORIES for k in ks] for tier, ks in TIERS.items()}

CLICK_VALUE = 1.0
# Cost per offer shown, in clicks (PROMO_BUDGET_v1.0_2.1).
OFFER_COST = {"budget": 0.0004, "standard": 0.0002, "premium": 0.0}

# The constants a business expert may change in a reward what-if (rlops reward whatif --param).
PARAMS = {
    "CLICK_VALUE": {
        "range": [0.0, 10.0],
        "rule_ref": "ENGAGEMENT_v1.0_1.1",
        "description": "value of a click on the offer shown",
    },
}


def shown(t):
    """The offer reached the user: the offer service answered."""
    return ~t.error


@component(objective="engagement", reason="the user clicked the offer shown")
@rule_ref("ENGAGEMENT_v1.0_1.1")
def click(t):
    return torch.where(shown(t) & t.ns.hidden.clicked, CLICK_VALUE, 0.0)


@component(objective="cost", reason="discount budget drawn by the offer shown")
@rule_ref("PROMO_BUDGET_v1.0_2.1")
def offer_cost(t):
    cost = torch.zeros_like(t.latency_ms)
    for tier, names in OFFERS_BY_TIER.items():
        cost = torch.where(t.action.isin(names), OFFER_COST[tier], cost)
    return torch.where(shown(t), -cost, 0.0)
