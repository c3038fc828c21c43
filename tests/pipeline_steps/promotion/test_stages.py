"""Roll-out stages with segments: params validation (one line per bad stage), the stage a
challenger serves and the next one, and the policy client's routing by the request's state."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from rlops.agent_sdk.serving import ServingState
from rlops.common.config import REPO_ROOT, resolve_params
from rlops.common.params_sources import ParamsError
from rlops.pipeline_steps.promotion.stages import Stage, current_stage, next_stage

GD = "user_profile.region == 'guangdong'"
PLAN = [Stage(0, 1.0, GD), Stage(1, 0.5, "user_profile.region != 'guangdong'"), Stage(2, 1.0, None)]


def _params(tmp_path: Path, stages: list) -> Path:  # type: ignore[type-arg]
    doc = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    doc["evaluate"]["rollout_stages"] = stages
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


def test_segment_stages_validate_against_the_pack(tmp_path: Path) -> None:
    f = _params(tmp_path, [{"segment": GD, "share": 0.5}, {"segment": None, "share": 1.0}])
    stages = resolve_params(
        "credit_approval", path=f, params=yaml.safe_load(f.read_text())
    ).model.evaluate.rollout_stages
    assert stages[0].segment == GD and stages[0].share == 0.5  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("stages", "message"),
    [
        ([{"segment": "decision.notified", "share": 1.0}, 1.0], "evaluate.rollout_stages.0.segment: segment 'decision"),
        ([{"segment": "user_profile.region == 'mars'"}, 1.0], "mars"),
        ([{"segment": GD, "share": 1.0}], "the last stage must serve everyone"),
        ([{"segment": GD, "share": 0}, 1.0], "share: Input should be greater than 0"),
        ([{"segment": "user_profile.region ==", "share": 1.0}, 1.0], "is not an expression"),
        ([{"segmnt": GD}, 1.0], "segmnt: Extra inputs are not permitted"),
    ],
)
def test_a_bad_stage_is_one_line_with_its_place(tmp_path: Path, stages: list, message: str) -> None:  # type: ignore[type-arg]
    f = _params(tmp_path, stages)
    with pytest.raises(ParamsError) as err:
        resolve_params("credit_approval", path=f, params=yaml.safe_load(f.read_text()))
    (problem,) = err.value.problems
    assert message in f"{problem.key}: {problem.message}" and problem.file is not None


def test_the_stage_a_challenger_serves_and_the_next() -> None:
    tags = {"traffic_fraction": "1.0", "traffic_segment": GD, "rlops.rollout.stage": "0"}
    assert current_stage(PLAN, tags) == PLAN[0]
    assert next_stage(PLAN, PLAN[0]) == PLAN[1] and next_stage(PLAN, PLAN[1]).final
    assert next_stage(PLAN, None) == PLAN[0]
    # a tag whose segment is not the stage's (the plan changed since) names no stage
    assert current_stage(PLAN, {**tags, "traffic_segment": "other"}) is None
    # a plain share plan: the stage by share
    plain = [Stage(0, 0.05, None), Stage(1, 0.15, None), Stage(2, 1.0, None)]
    assert current_stage(plain, {"traffic_fraction": "0.15"}) == plain[1]


def test_a_request_outside_the_segment_is_the_champions() -> None:
    state = ServingState(challenger=SimpleNamespace(loaded=True), challenger_fraction=1.0, challenger_segment=GD)  # type: ignore[arg-type]
    assert state.route("k1", "s", in_segment=True) == "challenger"
    assert state.route("k1", "s", in_segment=False) == "champion"
    assert state.route("k1", "s") == "champion"  # not told the state: never the challenger
    everyone = ServingState(challenger=SimpleNamespace(loaded=True), challenger_fraction=1.0)  # type: ignore[arg-type]
    assert everyone.route("k1", "s") == "challenger"
