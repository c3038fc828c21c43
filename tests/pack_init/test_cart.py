"""The small CART on hand-checkable cases: thresholds, enum and bool splits, leaves as rules."""

from __future__ import annotations

import numpy as np

from rlops.pack_init.cart import Feature, fit_tree, leaf_index, leaves, predict, shortest_between


def test_shortest_between_picks_the_number_with_the_fewest_decimals() -> None:
    assert shortest_between(549, 550) == 550
    assert shortest_between(0.4998, 0.5003) == 0.5
    assert shortest_between(12.31, 12.45) == 12.4
    assert shortest_between(12.31, 12.38) == 12.32
    assert shortest_between(1234, 1876) == 1300  # round hundreds before anything finer
    assert shortest_between(-3.2, -2.9) == -3


def test_a_classification_tree_recovers_a_threshold_and_a_bool_rule() -> None:
    # action 1 ("reject") when flagged or score < 550, else action 0
    score = np.array([300, 420, 549, 550, 600, 700, 800, 900, 610, 720], dtype=float)
    flag = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1], dtype=float)
    y = np.array([1, 1, 1, 0, 0, 0, 0, 0, 1, 1])
    tree = fit_tree(
        [Feature("p.score", "int", score), Feature("p.flag", "bool", flag)], y, classify=True, max_depth=3, min_leaf=1
    )
    assert (predict(tree, len(y)) == y).all()
    rules = {leaf.conditions: int(leaf.value) for leaf in leaves(tree)}
    assert rules == {
        ("p.score < 550",): 1,
        ("p.score >= 550", "p.flag"): 1,
        ("p.score >= 550", "not p.flag"): 0,
    }


def test_enum_splits_are_one_value_against_the_rest_and_nulls_wait_for_a_split() -> None:
    stage = Feature("c.stage", "enum", np.array([0, 0, 1, 1, 2, 2], dtype=float), ("new", "open", "closed"))
    # the amount is null (hidden) until the case is open: it can only be split on below that split
    amount = Feature("c.amount", "float", np.array([np.nan, np.nan, 10.0, 90.0, 15.0, 80.0]))
    y = np.array([0, 0, 1, 2, 3, 3])
    tree = fit_tree([amount, stage], y, classify=True, max_depth=3, min_leaf=1)
    conds = [leaf.conditions for leaf in leaves(tree)]
    assert all("c.amount" not in c[0] for c in conds)  # never the first split: it has nulls at the root
    assert (predict(tree, len(y)) == y).all()
    assert conds == [
        ("c.stage == 'new'",),
        ("c.stage == 'open'", "c.amount < 20"),  # 20: the fewest digits between 10 and 90
        ("c.stage == 'open'", "c.amount >= 20"),
        ("c.stage != 'new'", "c.stage != 'open'"),
    ]


def test_a_regression_tree_predicts_leaf_means_and_ignores_a_split_below_min_gain() -> None:
    x = np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=float)
    y = np.array([1.0, 1.0, 1.2, 0.8, 5.0, 5.0, 5.0, 5.0])
    tree = fit_tree([Feature("a.x", "float", x)], y, classify=False, max_depth=2, min_leaf=2, min_gain=0.02)
    assert [leaf.conditions for leaf in leaves(tree)] == [("a.x < 5",), ("a.x >= 5",)]  # the 1.2/0.8 noise is not split
    assert np.allclose(predict(tree, 8), [1.0] * 4 + [5.0] * 4)
    assert list(leaf_index(tree, 8)) == [0, 0, 0, 0, 1, 1, 1, 1]
