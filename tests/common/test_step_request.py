"""A step's options are declared once, on its request type: the command's flags, the DAG's Params
and conf check, and the retrain's skip digest all come from it, so adding an option is one edit."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from rlops.common import step_request
from rlops.common.errors import UserError
from rlops.common.step_request import option
from rlops.pipeline_steps.training.request import TrainRequest


@dataclasses.dataclass(frozen=True)
class WarmupTrainRequest(TrainRequest):
    """The training request with one option more, as a developer would add it."""

    warmup_fraction: float | None = option(
        None, minimum=0, maximum=1, help="share of the budget at a low learning rate (default: params)"
    )


@pytest.fixture
def warmup_request(monkeypatch: pytest.MonkeyPatch) -> type[TrainRequest]:
    """Every module that reads the training request sees the one with the new option."""
    from rlops.commands import train as train_command
    from rlops.pipeline_steps.orchestration import retrain_inputs, settings, tasks

    for module in (train_command, settings, tasks, retrain_inputs):
        monkeypatch.setattr(module, "TrainRequest", WarmupTrainRequest)
    return WarmupTrainRequest


def test_a_new_option_reaches_the_flag_the_dag_param_the_conf_check_and_the_skip_digest(
    warmup_request: type[TrainRequest], tmp_path: Path
) -> None:
    from rlops.cli import build_parser
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.orchestration import retrain_inputs, tasks
    from rlops.pipeline_steps.orchestration.settings import PackDagConfig, dag_params

    # the command line: a flag with its help and bounds, into the request
    args = build_parser().parse_args(["train", "policy", "--warmup-fraction", "0.25"])
    assert step_request.from_args(warmup_request, args).warmup_fraction == 0.25  # type: ignore[attr-defined]
    with pytest.raises(UserError, match=r"--warmup-fraction 1.5: expected a number >= 0, at most 1"):
        step_request.from_args(
            warmup_request, build_parser().parse_args(["train", "policy", "--warmup-fraction", "1.5"])
        )
    # the retrain DAG: a typed Param, and the conf check of a run triggered with a bad value
    params = dag_params(PackDagConfig("credit_approval", "v1", 5000, 1000), training=True)
    assert params["warmup_fraction"].schema == {"type": ["null", "number"], "minimum": 0, "maximum": 1}
    assert params["warmup_fraction"].description.startswith("share of the budget")
    good = {"scenario": "credit_approval", "reward_fn": "v1", "timesteps": 5000, "mode": "full", "dry_run": True}
    assert tasks.validate_conf({**good, "warmup_fraction": 0.25})["warmup_fraction"] == 0.25
    with pytest.raises(UserError, match="warmup_fraction 2"):
        tasks.validate_conf({**good, "warmup_fraction": 2})
    # the skip digest: a retrain asked for another warm-up is not the same retrain
    ctx = StepContext.create("credit_approval", "20260101T0000")
    a = retrain_inputs.retrain_inputs(ctx, "full", {**good, "warmup_fraction": 0.25})
    b = retrain_inputs.retrain_inputs(ctx, "full", {**good, "warmup_fraction": 0.5})
    assert a["conf"]["warmup_fraction"] == 0.25 and retrain_inputs.digest(a) != retrain_inputs.digest(b)


def test_options_say_what_they_accept() -> None:
    by_name = {o.name: o for o in step_request.options(TrainRequest)}
    lam, at, switch, mode = (by_name[k] for k in ("reward_blend_lambda", "reward_switch_at_iteration",
                                                   "reward_switch_to", "mode"))  # fmt: skip
    assert lam.problem(1) is None and lam.problem(0.5) is None and lam.problem(None) is None  # an int is a number
    assert lam.problem(True) == "reward_blend_lambda True: expected a number >= 0 (or null: params)"
    assert lam.problem(-1) and lam.problem("0.5")
    assert at.problem(2.0) and at.problem(0) and at.problem(1) is None  # an iteration is an integer >= 1
    assert switch.problem("v2") is None and switch.problem("v2x") and switch.problem("xv2")  # the whole value
    assert mode.problem(None) == "mode None: expected 'full', 'incremental'"  # a default, never null
    assert mode.problem("partial") and mode.problem("full") is None


def test_the_dag_param_is_nullable_only_when_params_decide() -> None:
    params = step_request.dag_params(TrainRequest, {"timesteps": 5000}, only=("timesteps", "reward_source"))
    assert params["timesteps"].schema["type"] == "integer" and params["timesteps"].value == 5000
    assert params["reward_source"].schema["type"] == ["null", "string"]
    assert params["reward_source"].schema["enum"] == [None, "scripted", "model", "blend"]


def test_a_field_without_option_or_of_another_type_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Bare:
        n: int = 1

    @dataclasses.dataclass(frozen=True)
    class Listy:
        xs: list[int] | None = option(None, help="a list")

    with pytest.raises(TypeError, match=r"Bare.n: declare it with"):
        step_request.options(Bare)
    with pytest.raises(TypeError, match=r"Listy.xs: an option is a bool, int, float or str"):
        step_request.options(Listy)


def test_the_command_offers_the_request_and_keeps_its_shared_flags() -> None:
    from rlops.cli import build_parser

    args = build_parser().parse_args(["train", "policy", "--reward-fn", "v0", "--reward-source", "blend"])
    request = step_request.from_args(TrainRequest, args)
    assert request.reward_source == "blend" and request.reward_fn is None  # --reward-fn is the shared flag
    assert not hasattr(args, "reward_switch_to")  # a running training switches with `train switch-reward`
    assert isinstance(args, argparse.Namespace)
