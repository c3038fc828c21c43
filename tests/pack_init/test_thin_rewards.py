"""``rlops init`` does not believe noise: on a recommender's log with 80 offers and a handful of
clicks, the fitted click reward cannot tell one offer from another (a policy trained on it has
nothing to exploit), and the component is marked thin evidence; a split needs paid scores on both
sides, and a well-evidenced component keeps its means."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlops.common.config import REPO_ROOT
from rlops.pack_init.cart import Feature, fit_tree, leaves
from rlops.pack_init.generate import InitRequest, draft_from_traces
from rlops.pack_init.rewards import MIN_EVENTS, trusted


@pytest.fixture(scope="module")
def recommender_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "offer_selection", check_liveness=False)
    df = rollout_traces(pack, random_policy(1), 8000, seed=3, profile="live", source="live")
    path = tmp_path_factory.mktemp("log") / "recsys.parquet"
    df.to_parquet(path)
    return path


def test_a_handful_of_clicks_over_80_offers_gives_no_offer_to_exploit(recommender_log: Path, tmp_path: Path) -> None:
    draft = draft_from_traces(InitRequest("recsys", tmp_path, str(recommender_log)))
    click = next(c for c in draft.reward.components if c.name == "click")
    assert click.thin and 0 < click.rows < 100
    click_rate = click.rows / draft.rows  # a click pays 1
    best = max(leaf.value for fit in click.per_action for leaf in leaves(fit.tree))
    assert best < 1.5 * click_rate, (best, click_rate)  # before: 0.083, 40x the click rate (1 click in 12 visits)
    cost = next(c for c in draft.reward.components if c.name == "offer_cost")
    assert not cost.thin and cost.r2 > 0.99


def test_a_split_needs_paid_scores_on_both_sides() -> None:
    x = np.arange(400, dtype=np.float64)
    y = np.zeros(400)
    y[:3] = 1.0  # three events, all below x = 3: a tree splits them off
    tree = fit_tree([Feature("f", "float", x)], y, classify=False, max_depth=2, min_leaf=1)
    assert tree.split is not None
    kept = trusted(tree, y, np.arange(400), prior=float(y.mean()), weight=0.0)
    assert kept.split is None and kept.value == pytest.approx(3 / 400)
    y[:] = 0.0
    y[: MIN_EVENTS * 3] = 1.0
    y[200 : 200 + MIN_EVENTS] = 1.0
    tree = fit_tree([Feature("f", "float", x)], y, classify=False, max_depth=1, min_leaf=1)
    assert trusted(tree, y, np.arange(400), prior=0.0, weight=0.0).split is not None
