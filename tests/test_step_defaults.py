"""One home for each default: the params model.

A step function's parameter named like a params key (``clusters``, ``ridge``, ``tolerance_s``…) takes
its value from the params block its caller hands on; a literal default there would be a second
statement of the setting, free to disagree with the params (``detect_drift``'s ``bh`` was false
while ``drift.bh`` is true). This test finds every literal default in ``rlops/pipeline_steps`` whose
parameter bears a params key's name and fails unless it is listed below as another setting of the
same name, with why.
"""

from __future__ import annotations

import ast
from pathlib import Path

from pydantic import BaseModel

from rlops.common.config import REPO_ROOT
from rlops.common.params_model import Params

STEPS = REPO_ROOT / "rlops" / "pipeline_steps"

#: ``<module>:<function>:<parameter>`` → why its literal default is not a params setting restated.
SAME_NAME_OTHER_SETTING = {
    "capture/core:capture_landing_zone:progress": "a terminal progress bar, not ppo.progress",
    "capture/core:write_capture:progress": "a terminal progress bar, not ppo.progress",
    "capture/step:capture_step:progress": "a terminal progress bar, not ppo.progress",
    "capture/step:capture_traces:progress": "a terminal progress bar, not ppo.progress",
    "stress/step:stress_test:progress": "a terminal progress bar, not ppo.progress",
    "stress/step:run_stress:progress": "a terminal progress bar, not ppo.progress",
    "drift/anomaly:pooled:run_key": "the name of a frame's column, not dvc.run_key",
    "drift/report:run_drift:track": "whether an ad hoc drift report is an MLflow run, not capture.track",
    "orchestration/settings:dag_params:mode": "a retrain DAG's training mode, not promotion.webhook.mode",
    "orchestration/settings:dag_settings:mode": "a retrain DAG's training mode, not promotion.webhook.mode",
    "promotion/flow:promote:staged": "a direct promotion switches at once unless asked (rlops model promote "
    "--staged); promotion.staged is what a promotion requested through an alias does",
    "promotion/ope:target_probabilities:distribution": "the target's action distribution, not exploration's",
    "promotion/ope_value:network_target:distribution": "the target's action distribution, not exploration's",
    "stress/checks:check_reward:tolerance": "float round-off of a reward bound, not ope.tolerance",
    "labels/select:kmeans:seed": "a helper's own generator; the label queue passes label_queue.seed",
    "labels/select:cluster_states:seed": "a helper's own generator; the label queue passes label_queue.seed",
    "promotion/gate_stats:paired_bootstrap:seed": "a helper's own generator; the gates pass evaluate.seed",
    "promotion/gates:comparison_gates:seed": "a helper's own generator; the evaluation passes evaluate.seed",
    "stress/checks:step_all:seed": "a helper's own generator; the stress test passes stress.seed",
    "stress/edge_states:edge_states:seed": "a helper's own generator; the stress test passes stress.seed",
}


def params_keys(model: type[BaseModel] = Params) -> set[str]:
    """The name of every leaf setting of the params model, any block."""
    keys: set[str] = set()
    for name, f in model.model_fields.items():
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            keys |= params_keys(f.annotation)
        else:
            keys.add(name)
    return keys


def literal_defaults(root: Path, names: set[str]) -> dict[str, object]:
    """``<module>:<function>:<parameter>`` → literal default, for parameters named in ``names``."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).with_suffix("").as_posix()
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            positional = fn.args.posonlyargs + fn.args.args
            pairs = list(zip(positional[len(positional) - len(fn.args.defaults) :], fn.args.defaults))
            pairs += [(a, d) for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults) if d is not None]
            for arg, default in pairs:
                if arg.arg in names and isinstance(default, ast.Constant) and default.value is not None:
                    found[f"{module}:{fn.name}:{arg.arg}"] = default.value
    return found


def test_no_step_restates_a_params_default() -> None:
    found = literal_defaults(STEPS, params_keys())
    restated = {k: v for k, v in found.items() if k not in SAME_NAME_OTHER_SETTING}
    assert not restated, (
        f"{restated}: a literal default for a setting the params model holds; take the value from the "
        "params block the caller hands on (or, for another setting of the same name, list it here with why)"
    )
    stale = sorted(set(SAME_NAME_OTHER_SETTING) - set(found))
    assert not stale, f"{stale} carry no such default any more: remove them from SAME_NAME_OTHER_SETTING"


def test_the_check_finds_a_restated_default(tmp_path: Path) -> None:
    (tmp_path / "step.py").write_text(
        "def fit(x, ridge=1.0, other=2, *, bh=False, seed=None): ...\ndef given(x, ridge): ...\n"
    )
    assert literal_defaults(tmp_path, {"ridge", "bh", "seed"}) == {"step:fit:ridge": 1.0, "step:fit:bh": False}
    assert {"ridge", "bh", "clusters", "tolerance_s"} <= params_keys()
