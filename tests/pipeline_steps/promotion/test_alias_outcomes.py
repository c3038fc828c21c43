"""An alias moving off a version rewrites what the version says of itself: the replaced champion
reads ``previous``, a former champion behind no alias ``retired``, a demoted one ``rolled_back``,
a challenger that stopped serving ``withdrawn`` — and none of them keeps a traffic share."""

from __future__ import annotations

import pytest

from rlops.pipeline_steps.infra.context import StepContext
from rlops.registry import tags as T
from rlops.registry.aliases import move_champion, rollback
from rlops.registry.client import policy_model_name

NAME = policy_model_name("credit_approval")


@pytest.fixture
def ctx(tmp_tracking: str, tmp_storage_root: str) -> StepContext:
    return StepContext.create("credit_approval", "20261130T0800")


def _versions(ctx: StepContext, n: int) -> list[str]:
    out = []
    for i in range(n):
        with ctx.tracker.start_run(f"fake-{i}") as run:
            run.log_text("weights", "policy_model/weights.txt")
            out.append(ctx.tracker.register_model(run.run_id, "policy_model", NAME))
    return out


def _fate(ctx: StepContext, version: str) -> tuple[str | None, float | None]:
    tags = ctx.tracker.model_version_tags(NAME, version)
    share = tags.get(T.VERSION.TRAFFIC_FRACTION)
    return tags.get(T.PROMOTION_OUTCOME), None if share is None else float(share)


def test_champion_moves_rewrite_the_outcomes_of_the_versions_left_behind(ctx: StepContext) -> None:
    v1, v2, v3 = _versions(ctx, 3)
    move_champion(ctx.tracker, NAME, v1)
    ctx.tracker.set_model_version_tags(NAME, v1, {T.VERSION.TRAFFIC_FRACTION: 1.0})  # a finished roll-out
    move_champion(ctx.tracker, NAME, v2)
    assert _fate(ctx, v1) == ("previous", 0.0) and _fate(ctx, v2)[0] == "champion"
    move_champion(ctx.tracker, NAME, v3)
    assert [_fate(ctx, v)[0] for v in (v1, v2, v3)] == ["retired", "previous", "champion"]
    rollback(ctx.tracker, NAME, "live return fell")
    assert ctx.tracker.aliases(NAME) == {"champion": v2, "previous": v1}
    assert [_fate(ctx, v)[0] for v in (v1, v2, v3)] == ["previous", "champion", "rolled_back"]


def test_a_challenger_that_stops_serving_is_withdrawn_with_no_share(ctx: StepContext) -> None:
    from rlops.pipeline_steps.promotion.alias_moves import stage_challenger, withdraw_challenger

    champ, a, b = _versions(ctx, 3)
    move_champion(ctx.tracker, NAME, champ)
    stage_challenger(ctx, a, 0.15, "staged")
    assert _fate(ctx, a) == ("challenger", 0.15)
    stage_challenger(ctx, b, 0.05, "staged")  # b replaces a as challenger
    assert ctx.tracker.get_alias(NAME, "challenger") == b
    assert _fate(ctx, a) == ("withdrawn", 0.0)
    assert f"replaced as challenger by v{b}" in ctx.tracker.model_version_tags(NAME, a)[T.PROMOTION_REASON]
    withdraw_challenger(ctx, b, "live A/B gate(s) failed at 5%")
    assert _fate(ctx, b) == ("withdrawn", 0.0) and "challenger" not in ctx.tracker.aliases(NAME)


def test_a_ui_challenger_on_the_champion_is_refused_and_leaves_the_champion_as_it_was(ctx: StepContext) -> None:
    """``challenger`` set in the MLflow UI on the serving champion: the request is refused (already
    the champion) and its alias removed, but the champion still reads ``champion`` with its share."""
    from rlops.pipeline_steps.promotion.flow import promote_from_alias
    from rlops.pipeline_steps.promotion.guard import UI_REQUEST

    v1, v2 = _versions(ctx, 2)
    move_champion(ctx.tracker, NAME, v1)
    move_champion(ctx.tracker, NAME, v2)
    ctx.tracker.set_model_version_tags(NAME, v2, {T.VERSION.TRAFFIC_FRACTION: 1.0})  # a finished roll-out
    before = ctx.tracker.model_version_tags(NAME, v2)
    ctx.tracker.client.set_registered_model_alias(NAME, "challenger", v2)  # what the MLflow UI does
    res = promote_from_alias(ctx, v2, requested_by=UI_REQUEST)
    assert not res.promoted and "already the champion" in res.reason, res.reason
    assert ctx.tracker.aliases(NAME) == {"champion": v2, "previous": v1}
    assert ctx.tracker.model_version_tags(NAME, v2) == before
    assert _fate(ctx, v2) == ("champion", 1.0)
