"""A saved policy served by numpy answers as the torch network does: the same greedy actions and
probabilities (max abs diff < 1e-5, masked actions exactly 0) over many observations of real packs,
for every network shape (history attention, feature normalisation, relu, one head per role); and
the policy client serves a registered version the same with runtime numpy as with torch."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlops.agent_sdk.numpy_policy import NumpyExportMissing, NumpyPolicy
from rlops.agent_sdk.policy_client import PolicyClient
from rlops.common.errors import UserError
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.model.policy_io import WEIGHTS_FILE, save_policy
from rlops.pipeline_steps.infra.context import StepContext
from rlops.registry.pyfunc_policy import POLICY_ARTIFACT
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import random_policy
from tests.agent_sdk.client_kit import NAME, PACK_DIR, SCENARIO, STATE, register_pair

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _observations(pack: Any, n_envs: int = 128, steps: int = 8) -> np.ndarray:
    env = pack.make_env(num_envs=n_envs, profile="live", seed=11)
    act, out = random_policy(seed=5), []
    for _ in range(steps):
        out.append(env.observe().numpy().copy())
        env.step(act(env))
    return np.concatenate(out)


def _scramble(policy: PolicyNetwork, seed: int) -> PolicyNetwork:
    """Weights far from the initialisation (a trained policy's are not orthogonal-small), and
    feature statistics that move every feature."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        if policy.obs_rms is not None:
            policy.obs_rms.mean.copy_(torch.randn(policy.obs_rms.mean.shape, generator=g))
            policy.obs_rms.var.copy_(torch.rand(policy.obs_rms.var.shape, generator=g) * 3 + 0.1)
    return policy.eval()


@pytest.mark.parametrize(
    "pack_name, widths",
    [
        ("credit_approval", {}),
        ("credit_approval", {"obs_norm": True, "activation": "relu", "hidden_sizes": (32, 16, 8)}),
        ("complaint_handling", {"embed_dim": 8, "obs_norm": True}),
        ("loan_desk", {}),  # roles: one actor head per role
    ],
)
def test_numpy_forward_pass_matches_torch(pack_name: str, widths: dict[str, Any], tmp_path: Path) -> None:
    torch.set_num_threads(1)
    pack = load_pack(SCENARIOS / pack_name, check_liveness=False)
    policy = _scramble(PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout, **widths)), seed=len(pack_name))
    save_policy(policy, tmp_path, metadata={"action_names": list(pack.scenario.action_names), "obs_columns": []})
    served = NumpyPolicy.load(tmp_path)
    obs = _observations(pack)
    ref = policy.act(torch.from_numpy(obs), deterministic=True)
    out = served.predict_obs(obs)
    assert len(obs) >= 1000
    assert np.abs(out["probs"] - ref.probs.numpy()).max() < 1e-5
    assert np.abs(out["value"] - ref.value.numpy()).max() < 1e-4
    assert np.abs(out["entropy"] - ref.entropy.numpy()).max() < 1e-4
    mask = obs[:, policy.n_features : policy.n_features + policy.n_actions] > 0.5
    assert (out["probs"][~mask] == 0).all()
    # the greedy actions agree wherever the best two legal actions are not a float32 tie
    top2 = np.sort(np.where(mask, ref.probs.numpy(), -1.0), axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 1e-5
    assert clear.mean() > 0.9
    assert np.array_equal(out["action_index"][clear], ref.action.numpy()[clear])
    np.testing.assert_allclose(out["logp"][clear], ref.logp.numpy()[clear], atol=1e-4)


def test_a_policy_saved_without_its_numpy_export_says_so(tmp_path: Path) -> None:
    policy = PolicyNetwork(PolicyConfig(3, 2, 0))
    save_policy(policy, tmp_path)
    (tmp_path / "policy.npz").unlink()
    assert (tmp_path / WEIGHTS_FILE).is_file()
    with pytest.raises(NumpyExportMissing, match=r"no policy\.npz.*torch installed"):
        NumpyPolicy.load(tmp_path)


def test_the_pyfunc_folder_name_is_the_one_the_numpy_loader_reads() -> None:
    from rlops.agent_sdk.numpy_policy import PYFUNC_POLICY_DIR

    assert PYFUNC_POLICY_DIR == ("artifacts", POLICY_ARTIFACT)


def test_policy_client_serves_the_numpy_export_as_torch_serves_the_pyfunc(tmp_tracking: str) -> None:
    pack = load_pack(PACK_DIR, check_liveness=False)
    v1, v2 = register_pair(pack)
    StepContext.create(run_key="20260105T1000").tracker.set_alias(NAME, "champion", v1)
    kw: dict[str, Any] = {"timeout_ms": 5000, "refresh_every_s": None, "challenger_fraction": 0.0, "exploration": 0.0}
    with (
        PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, runtime="torch", **kw) as t,
        PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, runtime="numpy", **kw) as n,
    ):
        assert (t.runtime, n.runtime) == ("torch", "numpy")
        assert isinstance(n.policies["champion"].model, NumpyPolicy)
        states = [STATE] + [
            {**STATE, "application": {**STATE["application"], "loan_amount": 1000.0 * i}} for i in range(1, 40)
        ]
        for i, s in enumerate(states):
            history = ["fetch_credit_report"] if i % 2 else []
            a, b = t.decide(s, history=history), n.decide(s, history=history)
            assert not b.fallback and b.policy_version == a.policy_version == f"{NAME}/{v1}"
            assert b.action == a.action and b.mask == a.mask
            assert max(abs(b.probs[k] - a.probs[k]) for k in a.probs) < 1e-5
        assert n.fallback_count == 0
    # the numpy export decides in the caller's thread, and still falls back when late or failing
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, runtime="numpy", **{**kw, "timeout_ms": 20}) as n:
        model = n.policies["champion"].model
        predict = model.predict_obs

        def slow(obs: np.ndarray) -> Any:
            time.sleep(0.05)
            return predict(obs)

        model.predict_obs = slow
        d = n.decide(STATE)
        assert d.fallback_reason.startswith("timeout: ") and d.policy_version == "rules" and d.propensity == 1.0

        def broken(obs: np.ndarray) -> Any:
            raise FloatingPointError("overflow")

        model.predict_obs = broken
        assert n.decide(STATE).fallback_reason.startswith("error: ")
        assert n.fallbacks == {"timeout": 1, "error": 1}
    with pytest.raises(UserError, match="runtime='onnx'"):
        PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, runtime="onnx", **kw)
