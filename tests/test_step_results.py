"""Each step hands back a typed record (a frozen dataclass on ``rlops.common.step_result.StepResult``),
not a ``dict[str, Any]``: its fields are the result's names and types, and ``as_dict()`` is what
leaves the process (CLI JSON, XCom). Every step entry point is checked: none returns a dict."""

from __future__ import annotations

import ast
import dataclasses
import importlib

import pytest

from rlops.common.config import REPO_ROOT
from rlops.common.step_result import StepResult

#: Every step entry point the DAG tasks and the commands call: module → function.
STEPS = {
    "rlops.pipeline_steps.capture.step": ("capture_step", "capture_traces"),
    "rlops.pipeline_steps.drift.check": ("drift_check",),
    "rlops.pipeline_steps.drift.calibrate": ("recalibrate",),
    "rlops.pipeline_steps.labels.step": ("label_queue_run", "label_queue_export", "label_queue_import"),
    "rlops.pipeline_steps.training.reward_model": ("train_reward_model_step",),
    "rlops.pipeline_steps.training.relabel": ("relabel_step",),
    "rlops.pipeline_steps.training.policy": ("train_policy",),
    "rlops.pipeline_steps.stress.step": ("stress_test",),
    "rlops.pipeline_steps.promotion.evaluate": ("evaluate_candidate",),
    "rlops.pipeline_steps.promotion.flow": ("promote", "promote_from_alias", "rollback"),
    "rlops.pipeline_steps.promotion.rollout": ("rollout_step",),
    "rlops.pipeline_steps.audit.replay": ("replay", "decision_path"),
    "rlops.pipeline_steps.audit.report": ("audit",),
}


def _return_annotations() -> dict[str, str]:
    out = {}
    for module, names in STEPS.items():
        path = REPO_ROOT / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text())
        found = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names}
        assert set(found) == set(names), f"{module} lacks {set(names) - set(found)}"
        out.update({name: ast.unparse(fn.returns) if fn.returns else "" for name, fn in found.items()})
    return out


def test_no_step_returns_a_dict() -> None:
    annotations = _return_annotations()
    dicts = {name for name, returns in annotations.items() if "dict[" in returns or not returns}
    assert not dicts, f"steps returning a dict (or not annotated): {sorted(dicts)}"


@pytest.mark.parametrize("name", sorted({n for names in STEPS.values() for n in names}))
def test_a_typed_step_result_is_a_frozen_step_result(name: str) -> None:
    module = next(m for m, names in STEPS.items() if name in names)
    returns = _return_annotations()[name]
    result_type = getattr(importlib.import_module(module), returns)
    assert issubclass(result_type, StepResult) and dataclasses.is_dataclass(result_type)
    first = dataclasses.fields(result_type)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):  # frozen: setting a field of any instance fails
        object.__new__(result_type).__setattr__(first, None)
