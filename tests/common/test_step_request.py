"""A step's options are declared once, on its request type: the command's flags, the DAG's Params
and conf check, and the retrain's skip digest all come from it, so adding an option is one edit."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.common import step_request
from rlops.common.errors import UserError
from rlops.common.step_request import option
from rlops.pipeline_steps.capture.request import CaptureRequest
from rlops.pipeline_steps.drift.request import DriftCheckRequest
from rlops.pipeline_steps.labels.request import LabelQueueRequest
from rlops.pipeline_steps.promotion.request import EvaluateRequest, OffPolicyRequest, PromoteRequest
from rlops.pipeline_steps.stress.request import StressRequest
from rlops.pipeline_steps.training.request import TrainRequest


@dataclasses.dataclass(frozen=True)
class WarmupTrainRequest(TrainRequest):
    """The training request with one option more, as a developer would add it."""

    warmup_fraction: float | None = option(
        None, minimum=0, maximum=1, help="share of the budget at a low learning rate (default: params)"
    )


@pytest.fixture
def warmup_request(swap_request: Callable[[type, type], type]) -> type[TrainRequest]:
    """Every module that reads the training request sees the one with the new option."""
    import rlops.cli  # noqa: F401 - the command modules, loaded before the swap

    return swap_request(TrainRequest, WarmupTrainRequest)


def test_a_new_option_reaches_the_flag_the_dag_param_the_conf_check_and_the_skip_digest(
    warmup_request: type[TrainRequest], tmp_path: Path
) -> None:
    from rlops.cli import build_parser
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.orchestration import retrain_inputs, run_conf
    from rlops.pipeline_steps.orchestration.settings import PackDagConfig, dag_params

    # the command line: a flag with its help and bounds, into the request
    args = build_parser().parse_args(["train", "policy", "--warmup-fraction", "0.25"])
    assert step_request.from_args(warmup_request, args).warmup_fraction == 0.25  # type: ignore[attr-defined]
    with pytest.raises(UserError, match=r"--warmup-fraction 1.5: expected a number >= 0, at most 1"):
        step_request.from_args(
            warmup_request, build_parser().parse_args(["train", "policy", "--warmup-fraction", "1.5"])
        )
    # the retrain DAG: a typed Param, and the conf check of a run triggered with a bad value
    params = dag_params(PackDagConfig("credit_approval", "v1", 5000, 1000), "retrain_full")
    assert params["warmup_fraction"].schema == {"type": ["null", "number"], "minimum": 0, "maximum": 1}
    assert params["warmup_fraction"].description.startswith("share of the budget")
    good = {"scenario": "credit_approval", "reward_fn": "v1", "timesteps": 5000, "mode": "full", "dry_run": True}
    assert run_conf.validate_conf({**good, "warmup_fraction": 0.25})["warmup_fraction"] == 0.25
    with pytest.raises(UserError, match="warmup_fraction 2"):
        run_conf.validate_conf({**good, "warmup_fraction": 2})
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


# --------------------------------------------------------------------------- every step's request
COMMON_FLAGS = {"-h", "--help", "--scenario", "--run-key", "--json", "--dry-run"}


def _command(path: tuple[str, ...]) -> argparse.ArgumentParser:
    from rlops.cli import build_parser

    parser = build_parser()
    for name in path:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


#: (command, its request — the alternative requests it runs one of (a tuple), or the requests whose
#: options it offers together (a list) —, flags it declares itself
#: though the request has the option (shared with other commands), flags of its own that are no
#: option of the request)
COMMANDS = [
    (("train", "policy"), TrainRequest, set(), {"--reward-fn"}),
    (("capture",), CaptureRequest, set(), {"--simulate", "--landing-zone", "--from-mlflow", "--otlp-file"}),
    (("stress",), StressRequest, {"--reward-fn"}, set()),
    (("drift", "check"), DriftCheckRequest, set(), {"--fail-on-drift"}),
    (("model", "evaluate"), (EvaluateRequest, OffPolicyRequest), set(), set()),
    (("model", "promote"), [EvaluateRequest, PromoteRequest], set(), set()),
    (("labels", "run"), LabelQueueRequest, set(), set()),
]


@pytest.mark.parametrize(("path", "request_type", "shared", "own"), COMMANDS, ids=[" ".join(c[0]) for c in COMMANDS])
def test_each_command_s_flags_are_its_request_s_options(
    path: tuple[str, ...], request_type: type | tuple[type, ...] | list[type], shared: set[str], own: set[str]
) -> None:
    parser = _command(path)
    actions = {flag: a for a in parser._actions for flag in a.option_strings}
    requests = tuple(request_type) if isinstance(request_type, (tuple, list)) else (request_type,)
    offered = {o.flag: o for r in requests for o in step_request.options(r) if o.cli}
    negated = {"--no-" + flag[2:] for flag, o in offered.items() if o.kind is bool}  # --greedy / --no-greedy
    assert set(actions) - COMMON_FLAGS - negated == set(offered) | own
    # the alternatives' required flags are optional each: their group requires one of them
    picking = {a for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}
    for flag, o in offered.items():
        if flag in shared:
            continue
        action = actions[flag]
        one_of = isinstance(request_type, tuple) and o.required
        assert (action.help, action.default, action.required) == (o.help, o.default, o.required and not one_of), flag
        assert action.type is (None if o.kind is bool else o.kind), flag
        assert (action in picking) == one_of, flag


def test_a_command_of_alternatives_runs_the_request_whose_flag_is_given() -> None:
    from rlops.cli import build_parser

    def request(*argv: str) -> object:
        return step_request.from_alternatives(
            build_parser().parse_args(["model", "evaluate", *argv]), EvaluateRequest, OffPolicyRequest
        )

    assert request("--candidate", "3", "--episodes", "50") == EvaluateRequest("3", 50)
    assert request("--target", "rules", "--greedy", "--window-hours", "6") == OffPolicyRequest(
        "rules", window_hours=6.0, greedy=True
    )
    with pytest.raises(UserError, match="^--greedy goes with --target, not with --candidate$"):
        request("--candidate", "3", "--greedy")
    with pytest.raises(SystemExit):  # argparse: exactly one of them
        request("--candidate", "3", "--target", "rules")


class _Handed(Exception):
    """What a stand-in step raises with the arguments it was handed."""


def _hand_over(*args: Any, **kwargs: Any) -> Any:
    raise _Handed(*args)


def _with_knob(base: type) -> type:
    """``base`` with one option more, as a developer would add it."""

    @dataclasses.dataclass(frozen=True)
    class WithKnob(base):  # type: ignore[valid-type, misc]  # a request class made at run time
        knob: int | None = option(None, minimum=1, dag=False, help="a new option of the step")

    return WithKnob


#: (command line, the command's module and its request's name, the step function it calls, the
#: request the command line makes)
HANDLERS = [
    (
        ["stress", "--reward-fn", "my_rewards/reward_v9.py", "--policy-version", "3"],
        ("rlops.commands.stress", "StressRequest"),
        ("rlops.pipeline_steps.stress.step", "stress_test"),
        {"reward_fn": "my_rewards/reward_v9.py", "policy_version": "3"},  # a file, as --reward-fn allows here
    ),
    (
        ["drift", "check", "--episodes", "50"],
        ("rlops.commands.drift", "DriftCheckRequest"),
        ("rlops.pipeline_steps.drift.check", "drift_check"),
        {"episodes": 50},
    ),
    (
        ["labels", "run", "--window-hours", "6", "--selection", "entropy"],
        ("rlops.commands.labels", "LabelQueueRequest"),
        ("rlops.pipeline_steps.labels.step", "label_queue_run"),
        {"window_hours": 6.0, "selection": "entropy"},
    ),
    (
        ["model", "evaluate", "--candidate", "4", "--episodes", "50"],
        ("rlops.commands.model", "EvaluateRequest"),
        ("rlops.pipeline_steps.promotion.evaluate", "evaluate_candidate"),
        {"candidate": "4", "episodes": 50},
    ),
    (
        ["model", "evaluate", "--target", "uniform", "--window-hours", "6"],
        ("rlops.commands.model", "OffPolicyRequest"),
        ("rlops.pipeline_steps.promotion.ope_targets", "evaluate_target"),
        {"target": "uniform", "window_hours": 6.0},
    ),
]


@pytest.mark.parametrize(("argv", "command", "step", "expected"), HANDLERS, ids=[h[2][1] for h in HANDLERS])
def test_a_new_option_of_a_step_s_request_reaches_the_step_through_its_command(
    argv: list[str],
    command: tuple[str, str],
    step: tuple[str, str],
    expected: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from rlops.cli import build_parser

    monkeypatch.setenv("RLOPS_STORAGE_ROOT", tmp_path.as_uri())
    module = importlib.import_module(command[0])
    request_type = _with_knob(getattr(module, command[1]))
    monkeypatch.setattr(module, command[1], request_type)
    monkeypatch.setattr(importlib.import_module(step[0]), step[1], _hand_over)
    args = build_parser().parse_args(
        [*argv, "--scenario", "credit_approval", "--run-key", "20260105T1000", "--knob", "2"]
    )
    with pytest.raises(_Handed) as handed:
        args.func(args)
    request = handed.value.args[1]  # the step is called as step(ctx, request, ...)
    assert request == request_type(**expected, knob=2)
    with pytest.raises(UserError, match=r"^--knob 0: expected an integer >= 1 \(or leave it out: params\)$"):
        step_request.from_args(request_type, build_parser().parse_args([*argv, "--knob", "0"]))


def test_model_promote_evaluates_with_the_evaluation_s_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rlops.cli import build_parser
    from rlops.pipeline_steps.promotion import flow

    monkeypatch.setenv("RLOPS_STORAGE_ROOT", tmp_path.as_uri())
    monkeypatch.setattr(flow, "promote", _hand_over)
    args = build_parser().parse_args(
        ["model", "promote", "--scenario", "credit_approval", "--candidate", "4", "--episodes", "50", "--staged"]
    )
    with pytest.raises(_Handed) as handed:
        args.func(args)
    assert handed.value.args[1:] == ("4", True, 50)  # promote(ctx, candidate, staged, episodes)


@pytest.mark.parametrize(
    ("flags", "params_staged", "staged"),
    [([], False, False), ([], True, True), (["--no-staged"], True, False), (["--staged"], False, True)],
)
def test_model_promote_stages_as_its_flag_says_else_as_params_promotion_staged(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: list[str], params_staged: bool, staged: bool
) -> None:
    from rlops.cli import build_parser
    from rlops.common.config import REPO_ROOT
    from rlops.pipeline_steps.promotion import flow

    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["promotion"]["staged"] = params_staged
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("RLOPS_PARAMS", str(tmp_path / "params.yaml"))
    monkeypatch.setenv("RLOPS_STORAGE_ROOT", tmp_path.as_uri())
    monkeypatch.setattr(flow, "promote", _hand_over)
    argv = ["model", "promote", "--scenario", "credit_approval", "--candidate", "4"]
    args = build_parser().parse_args([*argv, *flags])
    with pytest.raises(_Handed) as handed:
        args.func(args)
    assert handed.value.args[1:] == ("4", staged, None)


def test_a_required_option_is_a_required_flag_and_has_no_default() -> None:
    from rlops.cli import build_parser

    candidate = step_request.options(EvaluateRequest)[0]
    assert candidate.required and candidate.default is None and not candidate.nullable
    with pytest.raises(SystemExit):  # argparse: the flag must be given
        build_parser().parse_args(["model", "evaluate", "--episodes", "5"])
    with pytest.raises(TypeError):
        EvaluateRequest()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="a required option has no default"):
        option("1", required=True, help="x")


def test_the_retrain_s_stress_task_stresses_the_trained_version_with_the_conf_s_reward_function(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from rlops.pipeline_steps.orchestration import tasks
    from rlops.pipeline_steps.stress import step

    monkeypatch.setenv("RLOPS_STORAGE_ROOT", tmp_path.as_uri())
    monkeypatch.setattr(step, "stress_test", _hand_over)
    conf = {"scenario": "credit_approval", "run_key": "20260105T1000", "reward_fn": "v1", "dry_run": True}
    with pytest.raises(_Handed) as handed:
        tasks.stress_test(conf, {"model_version": 7})
    assert handed.value.args[1] == StressRequest(reward_fn="v1", policy_version="7")
