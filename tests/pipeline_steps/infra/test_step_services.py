"""Steps take the narrow services they use, not the whole context.

A function in ``rlops/pipeline_steps`` that takes a ``StepContext`` can read the raw params, the typed
config, the pack and the calibration through it; one that takes ``StepServices`` can read only the
run's identity and its storage, tracker and trace store (a type check holds it to that). The entry
points below still resolve their inputs from a context: a new one fails this test, and one that
stops taking a context must leave the list, so the list only shrinks.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rlops.common.config import REPO_ROOT

STEPS = REPO_ROOT / "rlops" / "pipeline_steps"

#: ``<module under pipeline_steps>:<function>`` still resolving its inputs from a StepContext: the steps'
#: entry points (what commands and Airflow tasks call) and their resolvers (``resolve_training``…).
TAKES_CONTEXT = frozenset(
    {
        "audit/replay:replay",
        "audit/report:audit",
        "capture/history:import_log",
        "capture/step:capture_step",
        "capture/step:capture_traces",
        "drift/calibrate:recalibrate",
        "drift/check:drift_check",
        "drift/fan_out:plan_slices",
        "drift/fan_out:summarise_slice",
        "labels/step:label_queue_export",
        "labels/step:label_queue_import",
        "labels/step:label_queue_run",
        "labels/step:resolve_label_queue",
        "orchestration/retrain_inputs:record_if_changed",
        "orchestration/retrain_inputs:retrain_inputs",
        "outcomes/step:capture_outcomes",
        "outcomes/step:import_outcomes",
        "promotion/evaluate:evaluate_candidate",
        "promotion/evaluate:resolve_evaluation",
        "promotion/flow:check_champion",
        "promotion/flow:promote",
        "promotion/flow:promote_from_alias",
        "promotion/flow:promote_requested",
        "promotion/ope_targets:evaluate_target",
        "promotion/rollout:resolve_rollout",
        "promotion/rollout:rollout_step",
        "promotion/webhook:__init__",
        "promotion/webhook:create_app",
        "promotion/webhook_events:handle_event",
        "stress/step:resolve_stress",
        "stress/step:stress_test",
        "stress/version:stress_version",
        "training/hot_reload:request_switch",
        "training/policy:train_policy",
        "training/profile:profile_training",
        "training/relabel:relabel_step",
        "training/reward_model:train_reward_model_step",
        "training/setup:resolve_training",
        "training/status:train_status",
        "training/tune:tune",
    }
)


def _takes_context(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    return any(a.annotation is not None and "StepContext" in ast.unparse(a.annotation) for a in args)


def functions_taking_context(root: Path = STEPS) -> set[str]:
    found = set()
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).with_suffix("").as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _takes_context(node):
                found.add(f"{module}:{node.name}")
    return found


def test_no_new_function_takes_the_whole_context() -> None:
    found = functions_taking_context()
    new = sorted(found - TAKES_CONTEXT)
    assert not new, (
        f"{new} take a StepContext: take StepServices (rlops/pipeline_steps/infra/services.py) and the "
        "resolved values the step needs instead"
    )
    gone = sorted(TAKES_CONTEXT - found)
    assert not gone, f"{gone} no longer take a StepContext: remove them from TAKES_CONTEXT"


def test_the_check_sees_a_function_taking_the_context(tmp_path: Path) -> None:
    (tmp_path / "step.py").write_text(
        "from rlops.pipeline_steps.infra.context import StepContext\n"
        "def narrow(ctx: 'StepServices') -> None: ...\n"
        "def whole(ctx: StepContext, n: int) -> None: ...\n"
    )
    assert functions_taking_context(tmp_path) == {"step:whole"}


def test_the_context_satisfies_the_services_protocol() -> None:
    """Entry points hand their context on to steps typed with StepServices: every member the
    protocol names is one the context has, with the same kind (attribute, property, method)."""
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.services import StepServices

    members = {n for n in vars(StepServices) if not n.startswith("_")} | set(StepServices.__annotations__)
    assert members >= {"scenario", "run_key", "storage", "tracker", "traces", "report_uri", "local_dir"}
    fields = set(StepContext.__dataclass_fields__)
    for name in members:
        assert name in fields or hasattr(StepContext, name), name
    for forbidden in ("params", "config", "load_pack", "read_calibration", "reward_choice", "pack_dir"):
        assert forbidden not in members
