"""One home for each default: a step option that leaves its value to params has no default of its
own (None) and names the params key it falls back on, and that key exists in the params model — so
a renamed or removed key cannot leave a command's help pointing nowhere, and no step restates a
default the params model holds."""

from __future__ import annotations

import dataclasses
import importlib
import re
from pathlib import Path

from pydantic import BaseModel

from rlops.common.params_model import Params
from rlops.common.step_request import options

PACKAGE = Path(__file__).resolve().parents[1] / "rlops"
#: ``params train.total_timesteps``, ``params label_queue.window_hours`` in an option's help.
PARAMS_KEY = re.compile(r"params ((?:[a-z_]+\.)+[a-z_]+)")
#: How an option's help says that params decide when it is not given.
FALLS_BACK = re.compile(r"\((?:default|null): params ")


def request_classes() -> list[type]:
    """Every step request: the dataclasses of the ``request`` modules of the steps and the DAG runs."""
    files = [*PACKAGE.glob("pipeline_steps/*/request.py"), PACKAGE / "pipeline_steps/orchestration/run_request.py"]
    out = []
    for path in sorted(files):
        module = importlib.import_module(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        out += [
            c
            for c in vars(module).values()
            if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == module.__name__
        ]
    return out


def has_key(model: BaseModel, dotted: str) -> bool:
    node: object = model
    for name in dotted.split("."):
        if not isinstance(node, BaseModel) or name not in type(node).model_fields:
            return False
        node = getattr(node, name)
    return True


def test_the_requests_are_found() -> None:
    names = {c.__name__ for c in request_classes()}
    assert {"TrainRequest", "CaptureRequest", "DriftCheckRequest", "LabelQueueRequest", "RetrainRequest"} <= names


def test_every_params_key_an_option_names_exists_in_the_params_model() -> None:
    params = Params()
    missing = [
        f"{request.__name__}.{o.name}: {key}"
        for request in request_classes()
        for o in options(request)
        for key in PARAMS_KEY.findall(o.help)
        if not has_key(params, key)
    ]
    assert not missing, f"option help naming a params key the params model does not have: {missing}"


def test_an_option_that_falls_back_on_params_states_no_default_of_its_own() -> None:
    restated = [
        f"{request.__name__}.{o.name} = {o.default!r}"
        for request in request_classes()
        for o in options(request)
        if FALLS_BACK.search(o.help) and o.default is not None
    ]
    falling_back = [o for r in request_classes() for o in options(r) if FALLS_BACK.search(o.help)]
    assert len(falling_back) >= 10  # the rule is looked at where it applies
    assert not restated, f"options that say params decide but hold a default of their own: {restated}"
