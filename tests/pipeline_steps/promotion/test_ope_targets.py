"""Any target estimated off-policy on a window of logged traffic (``rlops model evaluate --target``):
rules, uniform, a registered version and a file of per-row probabilities, each with every estimator
and its interval; the logging policy's own probabilities as a file give DR equal to the logged
return; every bad target is one clear :class:`UserError` before any estimate."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rlops.common.errors import UserError
from rlops.pipeline_steps.promotion.ope import ESTIMATORS
from rlops.pipeline_steps.promotion.ope_targets import evaluate_target, target_kind
from rlops.pipeline_steps.promotion.request import OffPolicyRequest
from tests.ope_target_kit import OPE, RUN_KEY, logged_rows, logging_probabilities, write_table, write_window
from tests.policy_kit import pack  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("steps_load_pack", "tmp_tracking", "tmp_storage_root")


def _ctx(**ope: Any) -> Any:
    from rlops.pipeline_steps.infra.context import StepContext

    return StepContext.create(run_key=RUN_KEY, overrides={"ope": {**OPE, **ope}, "tracking": {"http_max_retries": 0}})


@pytest.fixture
def ctx() -> Any:
    """A context whose trace store holds the logged window."""
    ctx = _ctx()
    write_window(ctx.storage, ctx.uri, logged_rows())
    return ctx


def test_target_kinds() -> None:
    assert [target_kind(s) for s in ("rules", "uniform", "3", "champion", "credit_approval-policy/3")] == [
        "rules",
        "uniform",
        "version",
        "version",
        "version",
    ]
    assert target_kind("missing.parquet") == target_kind("p.csv") == target_kind("p.jsonl") == "file"
    for bad, says in (("", "empty"), ("magic", "expected rules, uniform"), ("x" * 5000, "expected rules")):
        with pytest.raises(UserError, match=says):
            target_kind(bad)


def test_uniform_reports_every_estimator_with_its_interval(ctx: Any) -> None:
    res = evaluate_target(ctx, OffPolicyRequest("uniform"))
    doc = res.as_dict()
    assert doc["kind"] == "uniform" and doc["episodes"] == 400 and doc["rows"] == len(logged_rows())
    assert set(doc["estimates"]) == set(ESTIMATORS)
    for e in doc["estimates"].values():
        assert e["low"] <= e["value"] <= e["high"]
    assert doc["ess"] > 10 and doc["weights"]["max"] > 0 and 0 <= doc["unsupported_share"] <= 1
    assert doc["direct_method"] == "none" and doc["confidence"] == 0.95
    assert doc["window_start"] == "2026-01-04T11:00:00Z" and doc["window_end"] == "2026-01-05T11:00:00Z"
    assert math.isfinite(doc["logged_return"])


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_the_logging_policy_s_own_probabilities_give_dr_equal_to_the_logged_return(
    ctx: Any, tmp_path: Path, suffix: str
) -> None:
    path = write_table(logging_probabilities(logged_rows()), tmp_path / f"logger{suffix}")
    res = evaluate_target(ctx, OffPolicyRequest(str(path)))
    assert res.kind == "file" and set(res.result.estimates) == set(ESTIMATORS), res.result.skipped
    for name in ("pdis", "wis", "dr"):
        assert res.result.estimates[name].value == pytest.approx(res.result.logged_return, rel=1e-5), name
    assert res.result.ess == pytest.approx(400, rel=1e-4)
    # the sandbox's direct method needs a target that acts there: a file has none, and says so
    sandboxed = evaluate_target(_with_window(direct_method="sandbox"), OffPolicyRequest(str(path)))
    assert sandboxed.direct_method == "none" and any("PDIS" in n for n in sandboxed.notes)


def _with_window(**ope: Any) -> Any:
    ctx = _ctx(**ope)
    write_window(ctx.storage, ctx.uri, logged_rows())
    return ctx


def test_rules_need_no_champion_and_serve_with_their_exploration(ctx: Any) -> None:
    res = evaluate_target(ctx, OffPolicyRequest("rules"))
    assert res.kind == "rules" and set(res.result.estimates) == set(ESTIMATORS)
    assert "5% uniform exploration" in res.serves  # params exploration.share
    greedy = evaluate_target(ctx, OffPolicyRequest("rules", greedy=True))
    assert "alone" in greedy.serves and greedy.result.estimates["dr"].value != res.result.estimates["dr"].value
    # each rows' weight under the greedy rules is 0 or 1/μ: the rule engine's choice only
    assert greedy.result.weights is not None and greedy.result.weights.ess < res.result.weights.ess


def test_rules_on_traffic_the_rule_engine_served_read_the_logged_return(pack: Any) -> None:  # noqa: F811
    """Traffic served by the rule engine with its exploration share, propensities logged: the rules
    target rebuilt from the rows (their states, their masks) is that very policy — every weight 1."""
    import torch

    from rlops.sandbox.traces import rollout_traces

    ctx = _ctx()
    share = ctx.config.exploration.share
    gen = torch.Generator().manual_seed(3)

    def served(env: Any) -> Any:
        mask = env.action_masks()
        choice = env.scenario.rule_actions(env.S, mask)
        legal = mask.sum(dim=1).double()
        rand = torch.where(mask, torch.rand(mask.shape, generator=gen) + 1.0, torch.zeros(mask.shape)).argmax(1)
        a = torch.where(torch.rand(len(choice), generator=gen) < share, rand, choice)
        mu = (1 - share) * (a == choice).double() + share / legal
        return a, {"logp": mu.log().float()}

    start = pd.Timestamp("2026-01-05T09:10Z").to_pydatetime()
    live = {"profile": "live", "reward_fn": "v1", "source": "live", "episode_prefix": "live", "start_ts": start}
    rows = rollout_traces(pack, served, 300, seed=4, **live)
    write_window(ctx.storage, ctx.uri, rows)
    res = evaluate_target(ctx, OffPolicyRequest("rules")).result
    assert res.weights is not None and res.weights.max == pytest.approx(1.0, rel=1e-5)
    assert res.estimates["dr"].value == pytest.approx(res.logged_return, rel=1e-5)


def test_the_sandbox_direct_method_fits_for_rules_and_uniform(ctx: Any) -> None:
    for target in ("rules", "uniform"):
        res = evaluate_target(_with_window(direct_method="sandbox"), OffPolicyRequest(target))
        assert res.direct_method == "sandbox" and res.notes == []
        dr, pdis = res.result.estimates["dr"], res.result.estimates["pdis"]
        assert dr.value != pdis.value and math.isfinite(dr.se)
    none = evaluate_target(ctx, OffPolicyRequest("uniform", direct_method="none"))
    assert none.result.estimates["dr"].value == pytest.approx(none.result.estimates["pdis"].value)


def test_a_registered_version_as_it_serves(ctx: Any, pack: Any) -> None:  # noqa: F811
    from tests.policy_kit import NAME, cloned_rules_policy, register

    version = register(ctx, pack, cloned_rules_policy(pack))
    res = evaluate_target(ctx, OffPolicyRequest(version))
    assert res.kind == "version" and res.policy == f"{NAME}/{version}" and "as it will serve" in res.serves
    assert set(res.result.estimates) == set(ESTIMATORS)
    with pytest.raises(UserError, match=r"--target champion: the alias champion is not set"):
        evaluate_target(ctx, OffPolicyRequest("champion"))
    ctx.tracker.set_alias(NAME, "champion", version)
    assert evaluate_target(ctx, OffPolicyRequest("champion")).policy == f"{NAME}/{version}"


def test_an_unknown_version_is_refused(ctx: Any) -> None:
    with pytest.raises(UserError, match=r"--target 42: credit_approval-policy has no version 42"):
        evaluate_target(ctx, OffPolicyRequest("42"))
    with pytest.raises(UserError, match="belongs to scenario 'other'"):
        evaluate_target(ctx, OffPolicyRequest("other-policy/3"))


def _bad_file(tmp_path: Path, spoil: Any, suffix: str = ".csv") -> str:
    table = logging_probabilities(logged_rows())
    return str(write_table(spoil(table), tmp_path / f"bad{suffix}"))


def _first(table: pd.DataFrame, column: str, value: Any) -> pd.DataFrame:
    table = table.astype({column: object}) if isinstance(value, str) else table
    table.loc[table.index[0], column] = value
    return table


BAD_FILES = [
    ("missing rows", lambda t: t.iloc[5:], r"no probabilities for 5 of the \d[\d,]* logged rows .*first: trace_id "),
    (
        "not summing to 1",
        lambda t: _first(t, "approve", t["approve"].iloc[0] + 0.1),
        r"trace_id \S+: the probabilities sum to 1\.1\d*, expected 1",
    ),
    ("unknown action column", lambda t: t.assign(frobnicate=0.0), r"column 'frobnicate' is neither trace_id"),
    ("missing action column", lambda t: t.drop(columns=["approve"]), r"no column for action approve"),
    ("no trace_id", lambda t: t.drop(columns=["trace_id"]), r"no trace_id column"),
    ("NaN", lambda t: _first(t, "reject", np.nan), r"the probability of reject is nan, not a finite number"),
    ("negative", lambda t: _first(t, "reject", -0.5), r"the probability of reject is -0\.5, below 0"),
    ("text", lambda t: _first(t, "reject", "high"), r"the probability of reject is 'high', not a finite number"),
    ("duplicated trace_id", lambda t: pd.concat([t, t.iloc[:1]]), r"trace_id \S+ appears twice"),
]


@pytest.mark.parametrize(("what", "spoil", "says"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_probabilities_file_is_one_clear_error(
    ctx: Any, tmp_path: Path, what: str, spoil: Any, says: str
) -> None:
    with pytest.raises(UserError, match=says):
        evaluate_target(ctx, OffPolicyRequest(_bad_file(tmp_path, spoil)))


def test_mass_on_a_masked_action_names_the_row_and_the_action(ctx: Any, pack: Any, tmp_path: Path) -> None:  # noqa: F811
    rows = logged_rows()
    table = logging_probabilities(rows)
    actions = list(pack.scenario.action_names)
    masks = rows["action_mask"].astype(str)
    i = next(k for k, m in enumerate(masks) if "0" in m)
    masked, legal = masks.iloc[i].index("0"), masks.iloc[i].index("1")
    table.loc[table.index[i], actions] = [
        0.25 if k == masked else 0.75 if k == legal else 0.0 for k in range(len(actions))
    ]
    path = write_table(table, tmp_path / "masked.parquet")
    says = rf"trace_id {rows['trace_id'].iloc[i]}: 0\.25 on {actions[masked]}, which is masked"
    with pytest.raises(UserError, match=says):
        evaluate_target(ctx, OffPolicyRequest(str(path)))


def test_trace_ids_per_episode_need_the_step_column(pack: Any, tmp_path: Path) -> None:  # noqa: F811
    """Agent SDK traces carry one trace id per episode: the file tells its rows apart by step."""
    rows = logged_rows()
    table = logging_probabilities(rows)
    rows["trace_id"] = rows["episode_id"]
    ctx = _ctx()
    write_window(ctx.storage, ctx.uri, rows)
    table["trace_id"] = rows["episode_id"].to_numpy()
    with pytest.raises(UserError, match="appears twice"):
        evaluate_target(ctx, OffPolicyRequest(str(write_table(table, tmp_path / "per-episode.parquet"))))
    table.insert(1, "step", rows["step"].to_numpy())
    res = evaluate_target(ctx, OffPolicyRequest(str(write_table(table, tmp_path / "stepped.parquet"))))
    assert res.result.estimates["dr"].value == pytest.approx(res.result.logged_return, rel=1e-5)


def test_a_file_covering_more_than_the_window_says_what_it_left_aside(ctx: Any, tmp_path: Path) -> None:
    table = logging_probabilities(logged_rows())
    extra = table.iloc[:3].assign(trace_id=lambda t: "elsewhere-" + t["trace_id"])
    res = evaluate_target(ctx, OffPolicyRequest(str(write_table(pd.concat([table, extra]), tmp_path / "more.csv"))))
    assert res.notes == ["3 rows of the file are no logged row of the window's complete live episodes: left aside"]


def test_an_empty_window_is_insufficient_not_an_error(tmp_path: Path) -> None:
    res = evaluate_target(_ctx(), OffPolicyRequest("uniform"))
    assert res.rows == 0 and res.result.skipped and "0 complete live episodes" in res.result.skipped
    header = write_table(logging_probabilities(logged_rows()).iloc[:0], tmp_path / "header.csv")
    assert evaluate_target(_ctx(), OffPolicyRequest(str(header))).result.estimates == {}


def test_a_request_out_of_bounds_is_refused_by_the_library_too(ctx: Any) -> None:
    with pytest.raises(UserError, match=r"--window-hours 0: expected a number >= 0\.25"):
        evaluate_target(ctx, OffPolicyRequest("uniform", window_hours=0))
    with pytest.raises(UserError, match=r"--direct-method 'magic'"):
        evaluate_target(ctx, OffPolicyRequest("uniform", direct_method="magic"))
