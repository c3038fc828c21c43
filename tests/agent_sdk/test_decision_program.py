"""The agent's numpy programs give what the sandbox's torch programs give on the same states: masks,
observations, the rule engine and the acting role, over many states of every built-in pack; and
ActionMasker reads a production state as the policy client does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rlops.agent_sdk.decision_program import DecisionProgram
from rlops.agent_sdk.masks import ActionMasker
from rlops.sandbox.expr import BOOL, NUM, compile_expr
from rlops.sandbox.expr_numpy import NUMPY_OPS
from rlops.sandbox.expr_runtime import ExprType
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import random_policy

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
PACKS = sorted(p.name for p in SCENARIOS.iterdir() if (p / "scenario.yaml").is_file())


@pytest.mark.parametrize("name", PACKS)
def test_numpy_programs_match_the_sandbox_over_many_states(name: str) -> None:
    torch.set_num_threads(1)
    pack = load_pack(SCENARIOS / name, check_liveness=False)
    program = DecisionProgram.from_pack(SCENARIOS / name)
    assert program.layout == pack.scenario.layout and program.columns == pack.scenario.columns
    env = pack.make_env(num_envs=256, profile="live", seed=3)
    act = random_policy(seed=7)
    rows = 0
    for _ in range(2 * pack.scenario.spec.horizon):
        S = env.S.numpy()
        masks = program.action_masks(S)
        assert np.array_equal(masks, env.action_masks().numpy())
        assert np.array_equal(program.acting_role(S), pack.scenario.acting_role(env.S).numpy())
        rules = program.rule_actions(S, masks)
        assert np.array_equal(rules, pack.scenario.rule_actions(env.S, env.action_masks()).numpy())
        obs = program.encode(S, masks, env.history.numpy())
        np.testing.assert_array_equal(obs, env.observe().numpy())
        assert np.array_equal(program.clamp(S), S)  # the sandbox's states are already clamped
        rows += len(S)
        env.step(act(env))
    assert rows >= 256 * 2 * pack.scenario.spec.horizon


def test_clamp_rounds_and_clips_as_the_sandbox() -> None:
    pack = load_pack(SCENARIOS / "credit_approval", check_liveness=False)
    program = DecisionProgram(pack.scenario.spec)
    rng = np.random.default_rng(0)
    S = (rng.standard_normal((500, program.n_cols)) * 1e5).astype(np.float32)
    np.testing.assert_array_equal(program.clamp(S), pack.scenario.clamp(torch.from_numpy(S)).numpy())


# Every construct of the expression language on a 3-row state, numpy against torch.
_E = ExprType("enum", ("x", "y", "z"), "e")
_COLUMNS = {"a": (0, NUM), "b": (1, NUM), "f": (2, BOOL), "e": (3, _E)}
_S = np.array([[1.0, 2.0, 1.0, 0.0], [3.0, -1.0, 0.0, 2.0], [0.5, 0.0, 1.0, 1.0]], dtype=np.float32)


@pytest.mark.parametrize(
    "src",
    [
        "a < b and not f",
        "0 < a < 2 or e == 'z'",
        "e in ['x', 'y']",
        "e not in ['y']",
        "(a + b) * 2 - a / 4 > 1",
        "a // 2 + a % 2 + a ** 2 > 3",
        "min(a, b, 1) + max(a, 0.5) > 1",
        "abs(b) + clip(a, 0, 1) > 1",
        "exp(a) > 2.7",
        "log(a) < 0.1",
        "sigmoid(b) > 0.5",
        "(a if f else b) > 1",
        "(f if a > 1 else not f)",
        "f + (a > 1) >= 1",
        "b / 0 > 1",
        "true",
        "exp(0) > 0.5",
    ],
)
def test_expressions_evaluate_alike_on_numpy_and_torch(src: str) -> None:
    resolve = _COLUMNS.get
    np_out = compile_expr(src, resolve, ops=NUMPY_OPS)(_S)
    torch_out = compile_expr(src, resolve)(torch.from_numpy(_S)).numpy()
    assert np_out.shape == (3,) and np_out.dtype == torch_out.dtype
    np.testing.assert_array_equal(np_out, torch_out)


def test_numeric_expressions_agree_to_float32_rounding() -> None:
    resolve = _COLUMNS.get
    for src in ("exp(a) + log(a) * sigmoid(b)", "clip(a * 3, 0, 2) - min(a, b)", "(a if f else -b) * 2"):
        a = compile_expr(src, resolve, want=NUM, ops=NUMPY_OPS)(_S)
        b = compile_expr(src, resolve, want=NUM)(torch.from_numpy(_S)).numpy()
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_action_masker_reads_a_production_state() -> None:
    masker = ActionMasker.from_pack(SCENARIOS / "credit_approval")
    state = {
        "user_profile": {"age": 30, "income_monthly": 9000.0, "employment": "salaried", "region": "guangdong"},
        "application": {"loan_amount": 30000.0, "purpose": "car", "term_months": 12},
        "system_status": {"fraud_check_done": False, "credit_report_fetched": False},
        "decision": {"approval_result": "pending", "approved_amount": 0.0, "notified": False},
    }
    mask = masker.mask(state)
    assert len(mask) == len(masker.action_names) and all(isinstance(m, bool) for m in mask)
    flat = {f"state.{g}.{k}": v for g, d in state.items() for k, v in d.items()}
    assert masker.mask(flat) == mask
    assert masker.legal_actions(state) == [a for a, ok in zip(masker.action_names, mask) if ok]
    assert masker.rule_action(state) in masker.legal_actions(state)
    done = {**state, "system_status": {"fraud_check_done": True, "credit_report_fetched": True}}
    assert masker.mask(done) != mask  # the checks' preconditions read the state
