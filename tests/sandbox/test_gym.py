"""Gymnasium adapters: the single-episode env passes Gymnasium's own checker, the vector env has
the right spaces and shapes, and same-step autoreset hands back the final observation."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

from rlops.common.config import REPO_ROOT
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.gym_adapter import ScenarioGymEnv, ScenarioVectorEnv
from rlops.sandbox.pack import Pack, load_pack

REPO = REPO_ROOT
CREDIT = REPO / "scenarios" / "credit_approval"


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(CREDIT, check_liveness=False)


def idx(pack: Pack, name: str) -> int:
    return pack.scenario.action_names.index(name)


def progress_index(pack: Pack) -> int:
    return pack.scenario.layout.feature_names.index("episode.progress")


def test_check_env_passes(credit: Pack) -> None:
    env = ScenarioGymEnv(credit)
    with warnings.catch_warnings():
        # An unbounded Box is intended: unbounded fields have no natural scale.
        warnings.filterwarnings("ignore", message=".*Box observation space (minimum|maximum) value.*")
        check_env(env, skip_render_check=True)


def test_spaces_and_masks(credit: Pack) -> None:
    env = ScenarioGymEnv(credit, profile="live", reward_fn="v0")
    assert env.observation_space.shape == (credit.scenario.layout.dim,)
    assert env.observation_space.dtype == np.float32
    assert env.action_space == gym.spaces.Discrete(credit.scenario.n_actions)
    obs, info = env.reset(seed=4)
    assert obs.dtype == np.float32 and env.observation_space.contains(obs)
    mask = env.action_masks()
    assert mask.dtype == np.bool_ and mask.shape == (credit.scenario.n_actions,)
    assert mask.tolist() == [True, True, False, False, False, True, False]


def test_reset_with_a_seed_matches_the_batched_env(credit: Pack) -> None:
    env = ScenarioGymEnv(credit)
    obs, _ = env.reset(seed=31)
    ref = BatchedEnv(credit.scenario, credit.reward_fn(), 1)
    assert np.array_equal(obs, ref.reset(31)[0].numpy())
    obs2, _ = env.reset(seed=31)
    assert np.array_equal(obs, obs2)


def test_episode_end_and_next_episode(credit: Pack) -> None:
    env = ScenarioGymEnv(credit)
    first, _ = env.reset(seed=2)
    obs, reward, term, trunc, info = env.step(idx(credit, "escalate_to_human"))
    assert term and not trunc and info["human_takeover"]
    assert obs[progress_index(credit)] == pytest.approx(1 / credit.scenario.spec.horizon), "final observation"
    with pytest.raises(RuntimeError, match="call reset"):
        env.step(0)
    nxt, _ = env.reset()
    assert nxt[progress_index(credit)] == 0
    assert not np.array_equal(nxt, first), "the instance's next episode is a new applicant"


def test_reset_mid_episode_starts_a_new_episode(credit: Pack) -> None:
    env = ScenarioGymEnv(credit)
    env.reset(seed=5)
    env.step(idx(credit, "initiate_fraud_check"))
    obs, _ = env.reset()
    assert obs[progress_index(credit)] == 0, "reset() always starts an episode"
    assert env.action_masks()[idx(credit, "initiate_fraud_check")]
    # The abandoned episode's pending settlements do not leak into the new one.
    assert float(env._env.reward.pending.abs().sum()) == 0.0


def test_illegal_action_is_not_executed(credit: Pack) -> None:
    env = ScenarioGymEnv(credit)
    obs, _ = env.reset(seed=8)
    n_feat = credit.scenario.layout.n_features
    obs2, reward, term, trunc, info = env.step(idx(credit, "approve"))
    assert info["illegal_action"] and not term and not trunc
    same = [j for j in range(n_feat) if j != progress_index(credit)]
    assert np.array_equal(obs[same], obs2[same])


# ------------------------------------------------------------------------------------ vector env
def test_vector_env_spaces_and_shapes(credit: Pack) -> None:
    n = 6
    venv = ScenarioVectorEnv(credit, n)
    dim = credit.scenario.layout.dim
    assert venv.num_envs == n
    assert venv.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert venv.single_observation_space.shape == (dim,)
    assert venv.observation_space.shape == (n, dim)
    assert venv.single_action_space == gym.spaces.Discrete(credit.scenario.n_actions)
    assert venv.action_space == gym.spaces.MultiDiscrete([credit.scenario.n_actions] * n)
    obs, info = venv.reset(seed=10)
    assert obs.shape == (n, dim) and obs.dtype == np.float32
    assert venv.action_masks().shape == (n, credit.scenario.n_actions)
    ref = BatchedEnv(credit.scenario, credit.reward_fn(), n)
    assert np.array_equal(obs, ref.reset(10).numpy())
    actions = np.array([np.flatnonzero(m)[0] for m in venv.action_masks()])
    obs, reward, term, trunc, infos = venv.step(actions)
    assert obs.shape == (n, dim)
    assert reward.shape == (n,) and reward.dtype == np.float32
    assert term.shape == trunc.shape == (n,) and term.dtype == np.bool_
    assert infos["final_obs"].shape == (n, dim)
    assert infos["illegal_action"].shape == (n,) and not infos["illegal_action"].any()


def test_vector_env_same_step_autoreset(credit: Pack) -> None:
    n = 4
    venv = ScenarioVectorEnv(credit, n)
    venv.reset(seed=0)
    p = progress_index(credit)
    # Rows 0 and 2 escalate (episode ends at once), rows 1 and 3 run the fraud check.
    actions = np.array([idx(credit, "escalate_to_human"), idx(credit, "initiate_fraud_check")] * 2)
    obs, reward, term, trunc, infos = venv.step(actions)
    done = term | trunc
    assert done.tolist() == [True, False, True, False]
    final = infos["final_obs"]
    assert np.array_equal(obs[~done], final[~done])
    assert (final[done, p] > 0).all() and (obs[done, p] == 0).all()
    assert not np.array_equal(obs[done], final[done])
    # The returned observation of a finished row is its next episode, ready to act on.
    masks = venv.action_masks()
    assert masks[done, idx(credit, "initiate_fraud_check")].all()
    assert infos["episode_return"][done] == pytest.approx(reward[done])
