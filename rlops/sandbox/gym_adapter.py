"""Gymnasium adapters, so SB3 / CleanRL users can train on any scenario pack.

``ScenarioGymEnv`` is one episode at a time with ``action_masks()`` (what sb3-contrib's
MaskablePPO looks for). ``ScenarioVectorEnv`` exposes the batched environment as a
``gymnasium.vector.VectorEnv`` with same-step autoreset (the final observation is in
``infos["final_obs"]``). An action outside the mask is not executed: the state stays as it was,
``info["illegal_action"]`` is True, and the reward is what the reward function gives a step that
did nothing (for the credit pack, the per-step handling cost).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.pack import Pack


def _spaces(env: BatchedEnv) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    obs = gym.spaces.Box(low=-np.inf, high=np.inf, shape=(env.layout.dim,), dtype=np.float32)
    return obs, gym.spaces.Discrete(env.n_actions)


class ScenarioGymEnv(gym.Env):
    """A single episode of a pack's scenario behind the Gymnasium API."""

    metadata = {"render_modes": []}

    def __init__(self, pack: Pack, reward_fn: str | None = None, profile: str | None = None, seed: int = 0):
        self._env = BatchedEnv(
            pack.scenario, pack.reward_fn(reward_fn), num_envs=1, profile=profile, illegal_action="noop"
        )
        self.observation_space, self.action_space = _spaces(self._env)
        self._instance_seed = seed
        self._env.reset(seed)
        self._needs_reset = False
        self._mid_episode = False

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self._instance_seed = seed
            self._env.reset(seed)
        elif self._mid_episode:
            # Abandon the running episode: start the instance's next one, dropping its pending
            # settlements, exactly as if it had ended here.
            done = torch.ones(1, dtype=torch.bool, device=self._env.device)
            self._env.reward.reset_rows(done)
            self._env._autoreset(done, self._env.observe())
        # Otherwise the next episode of the same instance is already loaded (autoreset).
        self._needs_reset = False
        self._mid_episode = False
        return self._env.observe()[0].numpy().copy(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("episode is over: call reset() before step()")
        obs, reward, term, trunc, info = self._env.step(torch.tensor([int(action)]))
        done = bool(term[0] or trunc[0])
        self._needs_reset = done
        self._mid_episode = not done
        out_obs = (info.final_obs if done else obs)[0].numpy().copy()
        return (
            out_obs,
            float(reward[0]),
            bool(term[0]),
            bool(trunc[0]),
            {
                "illegal_action": bool(info.illegal[0]),
                "error": bool(info.error[0]),
                "latency_ms": float(info.latency_ms[0]),
                "human_takeover": bool(info.human_takeover[0]),
            },
        )

    def action_masks(self) -> np.ndarray:
        return self._env.action_masks()[0].numpy().copy()


class ScenarioVectorEnv(VectorEnv):
    """``num_envs`` episodes stepped together, as a Gymnasium vector env (numpy in and out)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        pack: Pack,
        num_envs: int,
        reward_fn: str | None = None,
        profile: str | None = None,
        device: str = "cpu",
    ):
        self._env = BatchedEnv(
            pack.scenario,
            pack.reward_fn(reward_fn),
            num_envs=num_envs,
            profile=profile,
            device=device,
            illegal_action="noop",
        )
        self.num_envs = num_envs
        self.single_observation_space, self.single_action_space = _spaces(self._env)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        return self._env.reset(seed or 0).cpu().numpy(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        obs, reward, term, trunc, info = self._env.step(torch.as_tensor(actions))
        infos = {
            "final_obs": info.final_obs.cpu().numpy(),
            "illegal_action": info.illegal.cpu().numpy(),
            "episode_return": info.episode_return.cpu().numpy(),
        }
        return obs.cpu().numpy(), reward.cpu().numpy(), term.cpu().numpy(), trunc.cpu().numpy(), infos

    def action_masks(self) -> np.ndarray:
        return self._env.action_masks().cpu().numpy()
