"""Each step hands back a typed record (a frozen dataclass on ``rlops.common.step_result.StepResult``),
not a ``dict[str, Any]``: its fields are the result's names and types, and ``as_dict()`` is what
leaves the process (CLI JSON, XCom). Every step entry point is checked: none returns a dict."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from collections.abc import Iterator

import pytest

from rlops.common.config import REPO_ROOT
from rlops.common.step_result import StepResult

#: Every step entry point the DAG tasks and the commands call: module → function.
STEPS = {
    "rlops.pipeline_steps.capture.step": ("capture_step", "capture_traces"),
    "rlops.pipeline_steps.drift.check": ("drift_check",),
    "rlops.pipeline_steps.drift.calibrate": ("recalibrate",),
    "rlops.pipeline_steps.drift.anomaly": ("check_return_anomaly",),
    "rlops.pipeline_steps.infra.signal_store": ("set_signal", "show_signals"),
    "rlops.pipeline_steps.labels.step": ("label_queue_run", "label_queue_export", "label_queue_import"),
    "rlops.pipeline_steps.training.reward_model": ("train_reward_model_step",),
    "rlops.pipeline_steps.training.relabel": ("relabel_step",),
    "rlops.pipeline_steps.training.policy": ("train_policy",),
    "rlops.pipeline_steps.training.status": ("train_status",),
    "rlops.pipeline_steps.training.hot_reload": ("request_switch",),
    "rlops.pipeline_steps.stress.step": ("stress_test",),
    "rlops.pipeline_steps.promotion.evaluate": ("evaluate_candidate",),
    "rlops.pipeline_steps.promotion.flow": ("promote", "promote_from_alias", "rollback"),
    "rlops.pipeline_steps.promotion.rollout": ("rollout_step",),
    "rlops.pipeline_steps.audit.replay": ("replay", "decision_path"),
    "rlops.pipeline_steps.audit.report": ("audit",),
    "rlops.pipeline_steps.audit.attribution": ("attribute",),
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
    returns = _return_annotations()[name].removesuffix(" | None")  # a step that may find nothing
    result_type = getattr(importlib.import_module(module), returns)
    assert issubclass(result_type, StepResult) and dataclasses.is_dataclass(result_type)
    first = dataclasses.fields(result_type)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):  # frozen: setting a field of any instance fails
        object.__new__(result_type).__setattr__(first, None)


# --------------------------------------------------------------------------- no public function returns a dict
STEPS_DIR = REPO_ROOT / "rlops" / "pipeline_steps"

#: Return annotations that are a dict of anything: ``dict[str, Any]``, optional or bare.
DICT_RETURNS = {"dict[str, Any]", "dict[str, Any] | None", "Optional[dict[str, Any]]", "dict", "dict | None"}

#: Methods that serialise a typed record, by name: the dict is what leaves the process.
SERIALISERS = {
    "as_dict": "a typed record's JSON document (CLI --json, XCom)",
    "to_dict": "a typed record's JSON document (a report, a stored state)",
}

#: Functions allowed to return a dict, by ``path::qualified name`` (``*``: every function of the module).
ALLOWED = {
    "orchestration/tasks.py::*": "Airflow task adapters: their XCom is a dict by design",
    "orchestration/run_conf.py::*": "a DAG run's conf, checked: Airflow hands it on as a dict",
    "orchestration/settings.py::*": "the keyword arguments of an Airflow DAG",
    "promotion/stages.py::Stage.tags": "serialiser: the stage as the model-version tags a policy client reads",
    "training/from_logs.py::LogWindow.params": "serialiser: the log window as the training run's MLflow params",
    "drift/field_fits.py::fit_field": "a distribution spec keyed by parameter name, the pack's own init format",
    "drift/field_fits.py::declared": "a distribution spec keyed by parameter name, the pack's own init format",
    "infra/context.py::StepContext.read_calibration": "the stored calibration document as read (the pack loads it)",
    "training/tune.py::defaults_of": "an Optuna hyper-parameter set keyed by knob name (enqueued as trial 0)",
    "training/tune.py::suggest": "an Optuna hyper-parameter set keyed by knob name (a trial's point)",
    # remaining: still a dict, to be typed
    "orchestration/retrain_inputs.py::retrain_inputs": "remaining: the digest document a retrain's inputs hash to",
    "drift/fan_out.py::summarise_slice": "remaining: a drift slice's counts, pushed as XCom by the mapped task",
    "promotion/evaluate_report.py::rounded": "remaining: rounds the numbers of the evaluation report's document",
    "promotion/webhook_events.py::handle_event": "remaining: the webhook's JSON answer",
    "promotion/webhook_events.py::revert_alias": "remaining: the webhook's JSON answer",
    "promotion/webhook_events.py::deliver_to_airflow": "remaining: the webhook's JSON answer",
    "stress/edge_states.py::describe_state": "remaining: an edge state as the stress report shows it",
    "stress/report.py::report_dict": "remaining: the stress report's JSON document",
}


def _functions(body: list[ast.stmt], prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Module-level functions and the methods of its classes, by qualified name."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body, f"{prefix}{node.name}.")


def _dict_returns() -> dict[str, int]:
    """``path::qualified name`` → line of every public function annotated to return a dict."""
    found = {}
    for path in sorted(STEPS_DIR.rglob("*.py")):
        rel = path.relative_to(STEPS_DIR).as_posix()
        for qualname, fn in _functions(ast.parse(path.read_text()).body):
            if fn.name.startswith("_") or fn.returns is None:
                continue
            if ast.unparse(fn.returns).replace("'", "").replace('"', "") in DICT_RETURNS:
                found[f"{rel}::{qualname}"] = fn.lineno
    return found


def _allowed(key: str) -> bool:
    path, qualname = key.split("::")
    return qualname.rsplit(".", 1)[-1] in SERIALISERS or key in ALLOWED or f"{path}::*" in ALLOWED


def test_no_public_function_of_the_steps_returns_a_dict() -> None:
    """A step's result is a typed record; a dict is what its ``as_dict()`` gives."""
    offenders = []
    for key, line in _dict_returns().items():
        if not _allowed(key):
            path, qualname = key.split("::")
            offenders.append(f"rlops/pipeline_steps/{path}:{line}: {qualname}")
    assert not offenders, "public functions returning a dict (return a typed record instead):\n" + "\n".join(offenders)


def test_the_allow_list_names_only_functions_that_still_return_a_dict() -> None:
    """An entry whose function no longer returns a dict (typed since, renamed, moved) is dropped."""
    found = _dict_returns()
    stale = [
        key
        for key in ALLOWED
        if (key not in found if not key.endswith("::*") else not any(k.startswith(key[:-1]) for k in found))
    ]
    assert not stale, f"allow-list entries that no longer return a dict: {stale}"
