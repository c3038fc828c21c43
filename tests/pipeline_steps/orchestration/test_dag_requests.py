"""A new option of a step's request is one edit: the step's command offers the flag, its DAG the
typed Param, the run's conf check refuses a bad value, the task hands the value to the step (and,
for a retrain, a changed value makes it train again)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from rlops.common.errors import UserError
from rlops.common.step_request import option
from rlops.pipeline_steps.capture.request import CaptureRequest
from rlops.pipeline_steps.drift.request import DriftCheckRequest
from rlops.pipeline_steps.labels.request import LabelQueueRequest
from rlops.pipeline_steps.orchestration import retrain_inputs, run_conf, tasks
from rlops.pipeline_steps.orchestration.settings import DAG_KINDS, DAG_REQUESTS, PackDagConfig, dag_params
from rlops.pipeline_steps.promotion.request import PromoteRequest, RolloutRequest
from rlops.pipeline_steps.training.request import TrainRequest

PACK = PackDagConfig("credit_approval", "v1", 5000, 1000)
BASE = {"scenario": "credit_approval", "reward_fn": "v1", "timesteps": 5000, "mode": "full", "dry_run": True}


class _Handed(Exception):
    """What a stand-in step raises with the arguments it was handed."""


def _hand_over(*args: Any, **kwargs: Any) -> Any:
    raise _Handed(*args, kwargs)


def _with_knob(base: type) -> type:
    """``base`` with one option more, as a developer would add it."""

    @dataclasses.dataclass(frozen=True)
    class WithKnob(base):  # type: ignore[valid-type, misc]  # a request class made at run time
        knob: int | None = option(None, minimum=1, help="a new option of the step (default: params)")

    return WithKnob


#: (step, its request, the DAG kind that runs it, its command, the step function the task calls,
#: how the task is called with a checked conf)
STEPS: list[tuple[str, type, str, list[str], tuple[str, str], Callable[[Mapping[str, Any]], Any]]] = [
    (
        "drift_check",
        DriftCheckRequest,
        "drift_monitor",
        ["drift", "check"],
        ("rlops.pipeline_steps.drift.check", "drift_check"),
        lambda conf: tasks.detect_drift(conf, []),
    ),
    (
        "capture",
        CaptureRequest,
        "trace_capture",
        ["capture"],
        ("rlops.pipeline_steps.capture.step", "capture_step"),
        tasks.capture,
    ),
    (
        "label_queue",
        LabelQueueRequest,
        "label_queue",
        ["labels", "run"],
        ("rlops.pipeline_steps.labels.step", "label_queue_run"),
        tasks.label_queue,
    ),
    (
        "rollout",
        RolloutRequest,
        "rollout",
        ["model", "rollout"],
        ("rlops.pipeline_steps.promotion.rollout", "rollout_step"),
        tasks.rollout,
    ),
    (
        "training",
        TrainRequest,
        "retrain_full",
        ["train", "policy"],
        ("rlops.pipeline_steps.training.policy", "train_policy"),
        lambda conf: tasks.train_policy(conf, "full"),
    ),
]


@pytest.mark.parametrize(
    ("step", "request_type", "kind", "command", "function", "call"), STEPS, ids=[s[0] for s in STEPS]
)
def test_a_new_option_reaches_the_command_the_dag_the_conf_check_and_the_step(
    step: str,
    request_type: type,
    kind: str,
    command: list[str],
    function: tuple[str, str],
    call: Callable[[Mapping[str, Any]], Any],
    swap_request: Callable[[type, type], type],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    import importlib

    from rlops.cli import build_parser

    monkeypatch.setenv("RLOPS_STORAGE_ROOT", tmp_path.as_uri())
    knobbed = swap_request(request_type, _with_knob(request_type))
    # the command: a flag with its help
    parser_help = _command_help(build_parser(), command)
    assert "--knob" in parser_help and "a new option of the step" in parser_help
    # the DAG: a typed Param with the option's bounds and help
    param = dag_params(PACK, kind)["knob"]
    assert param.schema == {"type": ["null", "integer"], "minimum": 1}
    assert param.description.startswith("a new option of the step")
    # the conf check: a bad value refused by name, a good one kept
    with pytest.raises(UserError, match=r"invalid DAG run conf: knob 0: expected an integer >= 1"):
        run_conf.validate_conf({**BASE, "knob": 0})
    conf = run_conf.validate_conf({**BASE, "knob": 2})
    assert conf["knob"] == 2
    # the task: the step is handed a request with the value
    monkeypatch.setattr(importlib.import_module(function[0]), function[1], _hand_over)
    with pytest.raises(_Handed) as handed:
        call(conf)
    request = handed.value.args[1]
    assert isinstance(request, knobbed) and request.knob == 2  # type: ignore[attr-defined]


def test_a_new_training_option_changes_the_retrain_s_skip_digest(
    swap_request: Callable[[type, type], type], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlops.pipeline_steps.infra.context import StepContext

    monkeypatch.setenv("RLOPS_STORAGE_ROOT", tmp_path.as_uri())
    swap_request(TrainRequest, _with_knob(TrainRequest))
    ctx = StepContext.create("credit_approval", "20260101T0000")
    a = retrain_inputs.retrain_inputs(ctx, "full", run_conf.validate_conf({**BASE, "knob": 2}))
    b = retrain_inputs.retrain_inputs(ctx, "full", run_conf.validate_conf({**BASE, "knob": 3}))
    assert a["conf"]["knob"] == 2 and retrain_inputs.digest(a) != retrain_inputs.digest(b)


def test_a_new_promotion_option_reaches_the_promote_dag_its_conf_check_and_the_step(
    swap_request: Callable[[type, type], type], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from rlops.pipeline_steps.promotion import flow

    monkeypatch.setenv("RLOPS_STORAGE_ROOT", tmp_path.as_uri())
    knobbed = swap_request(PromoteRequest, _with_knob(PromoteRequest))
    assert dag_params(PACK, "promote")["knob"].schema == {"type": ["null", "integer"], "minimum": 1}
    with pytest.raises(UserError, match="knob 0"):
        run_conf.validate_promotion_conf({**BASE, "candidate": "3", "knob": 0})
    conf = run_conf.validate_promotion_conf({**BASE, "candidate": "3", "knob": 2})
    monkeypatch.setattr(flow, "promote_requested", _hand_over)
    with pytest.raises(_Handed) as handed:
        tasks.promote_requested(conf)
    promotion = handed.value.args[1]
    assert isinstance(promotion, knobbed) and (promotion.candidate, promotion.knob) == ("3", 2)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("given", "staged"), [({}, None), ({"staged": True}, True), ({"staged": False}, False)])
def test_the_promote_dag_stages_as_its_conf_says_else_as_params(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: dict[str, Any], staged: bool | None
) -> None:
    from rlops.pipeline_steps.promotion import flow

    monkeypatch.setenv("RLOPS_STORAGE_ROOT", tmp_path.as_uri())
    assert dag_params(PACK, "promote")["staged"].schema == {"type": ["null", "boolean"]}
    conf = run_conf.validate_promotion_conf({**BASE, "candidate": "3", **given})
    monkeypatch.setattr(flow, "promote_from_alias", _hand_over)
    with pytest.raises(_Handed) as handed:
        tasks.promote_requested(conf)
    # None: promote_from_alias reads params promotion.staged
    assert handed.value.args[-1] == {"requested_by": "airflow", "staged": staged}


def test_each_dag_offers_its_requests_and_only_the_retrains_offer_training() -> None:
    assert set(DAG_REQUESTS) == set(DAG_KINDS)
    for kind in DAG_KINDS:
        params = dag_params(PACK, kind)
        assert {"scenario", "reward_fn", "timesteps", "mode", "dry_run"} <= set(params)
        assert ("reward_source" in params) == kind.startswith("retrain_"), kind
        assert ("force" in params) == kind.startswith("retrain_"), kind
    assert "simulate" in dag_params(PACK, "trace_capture")
    assert {"candidate", "requested_by"} <= set(dag_params(PACK, "promote"))


def test_the_checked_conf_reads_as_one_typed_record() -> None:
    conf = run_conf.validate_conf({**BASE, "staged": True, "reason": "drift", "force": True})
    run = run_conf.RunConf.of(conf)
    assert (run.scenario, run.reward_fn, run.mode, run.run.dry_run) == ("credit_approval", "v1", "full", True)
    assert (run.retrain.staged, run.retrain.reason, run.retrain.force) == (True, "drift", True)
    assert run.request(TrainRequest).timesteps == 5000
    with pytest.raises(UserError, match=r"reason 'xxxx.*: expected a text of at most 200 characters"):
        run_conf.validate_conf({**BASE, "reason": "x" * 201})


def _command_help(parser: Any, command: list[str]) -> str:
    """The help text of one subcommand of the CLI."""
    import argparse

    for word in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return str(parser.format_help())
