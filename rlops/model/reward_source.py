"""Where policy training takes its per-step reward from: ``scripted``, ``model`` or ``blend``.

* ``scripted`` — the pack's reward function, as before;
* ``model`` — the reward model's score of ``(state features, action, outcome)`` alone (the
  scripted components are weighted 0 and the repeat penalty is off);
* ``blend`` — ``scripted + λ · model``.

The model's score enters the environment as a reward hook (:meth:`BatchedEnv.add_reward_hook`),
so it shows up in every step's breakdown as ``hook:reward_model``, is clipped with the rest, and
PPO needs no change. The hook scores the observation *before* the step — the state the action was
chosen in — with the outcome features the reward model was trained on (latency, error, done).

The score is centred by default (``train.reward_model_centred``): the chosen action's score minus
the mean score of the state's legal actions (scored with the same outcome features). A
Bradley–Terry model learns only differences between actions of the same state; the level of its
scores from state to state is free (the centring term of its loss only pulls it towards 0), and PPO
would chase that level — steering towards states the model happens to score high — instead of
taking, in each state, the actions the labels prefer. Centred, the model's term pays nothing on
average to a policy that picks uniformly among the legal actions, so it shapes choices, not routes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rlops.model.reward_model import RewardModel
from rlops.model.reward_pairs import outcome_features

REWARD_SOURCES = ("scripted", "model", "blend")
HOOK_NAME = "reward_model"


@dataclass(frozen=True)
class RewardSource:
    """The reward source of a training run (``train.reward_source``, ``train.reward_blend_lambda``)."""

    kind: str = "scripted"
    blend_lambda: float = 1.0
    centred: bool = True
    """Score the action relative to the mean over the state's legal actions (see the module doc)."""

    def __post_init__(self) -> None:
        if self.kind not in REWARD_SOURCES:
            raise ValueError(f"reward source {self.kind!r}: expected one of {list(REWARD_SOURCES)}")
        if not (isinstance(self.blend_lambda, (int, float)) and self.blend_lambda >= 0):
            raise ValueError(f"reward blend lambda {self.blend_lambda!r}: expected a number >= 0")

    @property
    def needs_model(self) -> bool:
        return self.kind != "scripted"

    @property
    def model_weight(self) -> float:
        """Weight of the model's score in the step reward."""
        return {"scripted": 0.0, "model": 1.0, "blend": float(self.blend_lambda)}[self.kind]


def blend_rewards(scripted: Tensor, model_score: Tensor, source: RewardSource) -> Tensor:
    """The step reward a source yields from the two parts (unclipped; the reference for the hook)."""
    if source.kind == "scripted":
        return scripted
    if source.kind == "model":
        return model_score
    return scripted + source.blend_lambda * model_score


def model_only(fn: Any) -> Any:
    """``fn`` with every objective weighted 0 and no repeat penalty: the ``model`` source keeps the
    scripted breakdown visible (all zeros) but pays nothing from it. A weight a business signal
    drives is dropped too: it would set its objective's weight again on every step."""
    return dataclasses.replace(
        fn, weights={k: 0.0 for k in fn.weights}, schedule=(), repeat_penalty=None, signal_weights=()
    )


def centred_scores(model: RewardModel, feats: Tensor, actions: Tensor, outcomes: Tensor, masks: Tensor) -> Tensor:
    """``r(s, a) − mean over the legal actions a' of r(s, a')`` (every action scored with ``outcomes``)."""
    n = feats.shape[0]
    every = torch.stack(
        [
            model(feats, torch.full((n,), a, dtype=torch.long, device=feats.device), outcomes)
            for a in range(model.n_actions)
        ],
        dim=1,
    )
    legal = masks.to(every.dtype)
    mean = (every * legal).sum(dim=1) / legal.sum(dim=1).clamp_min(1.0)
    return every.gather(1, actions.long()[:, None])[:, 0] - mean


def reward_model_hook(env: Any, model: RewardModel, centred: bool = False) -> Any:
    """A reward hook that scores each executed step with ``model`` (0 for a masked no-op);
    ``centred``: relative to the mean score of the state's legal actions."""
    F = env.layout.n_features
    model = model.to(env.device).eval()

    def hook(t: Any) -> Tensor:
        # While the reward is computed the environment still holds the pre-step state, so its
        # observation and masks are those the action was chosen on.
        feats = env.observe()[:, :F]
        codes = t.action.codes
        out = outcome_features(t.latency_ms, t.error, t.terminated | t.truncated)
        with torch.no_grad():
            chosen = codes.long().clamp_min(0)
            score = (
                centred_scores(model, feats, chosen, out, env.action_masks()) if centred else model(feats, chosen, out)
            )
        return torch.where(codes >= 0, score, torch.zeros_like(score))

    return hook


def apply_reward_source(env: Any, source: RewardSource, model: RewardModel | None) -> None:
    """Install ``source`` on ``env`` (a ``BatchedEnv``); ``scripted`` leaves it untouched."""
    if not source.needs_model:
        return
    if model is None:
        raise ValueError(
            f"reward source {source.kind!r} needs a trained reward model; train one first "
            "(rlops train-reward-model) or use reward source 'scripted'"
        )
    if model.n_features != env.layout.n_features or model.n_actions != env.n_actions:
        raise ValueError(
            f"the reward model scores {model.n_features} state features / {model.n_actions} actions, "
            f"but the environment has {env.layout.n_features} / {env.n_actions}; it was trained on "
            "another scenario layout"
        )
    if source.kind == "model":
        env.set_reward_fn(model_only(env.reward_fn))
    env.add_reward_hook(
        HOOK_NAME, reward_model_hook(env, model, source.centred), weight=source.model_weight, rule_ref=None
    )


__all__ = [
    "REWARD_SOURCES",
    "HOOK_NAME",
    "RewardSource",
    "blend_rewards",
    "model_only",
    "centred_scores",
    "reward_model_hook",
    "apply_reward_source",
]
