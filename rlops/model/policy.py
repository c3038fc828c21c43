"""The decision policy: an actor-critic network over the sandbox's flat observation.

The observation of a scenario is ``[features | action mask | last-k action codes]`` (see
``rlops.sandbox.compile.ObsLayout``). The network

* embeds the last ``k`` actions (code 0 = none, ``a + 1`` = action ``a``) with a learned position
  embedding and attends over them with a single head whose query comes from the state (features
  and mask), so "what was done so far" is summarised in an ``embed_dim`` vector;
* feeds ``[features, mask, history summary]`` to two MLPs: the actor (logits over actions) and the
  critic (state value). Separate trunks, as in CleanRL, keep the value loss from pulling on the
  policy's features;
* optionally (``obs_norm``) standardises the state features with running statistics it holds as
  buffers, so a saved, served or exported policy normalises exactly as in training;
* applies the mask to the logits with a large *finite* negative (never ``-inf``; see
  :mod:`rlops.model.masked_distributions`): a masked action gets probability 0, log-probabilities
  stay finite, and a row with every action masked yields a uniform distribution instead of NaN.

Serving goes through :meth:`PolicyNetwork.act` (eager) or :func:`rlops.model.policy_io.export_policy`
(a ``torch.export`` program with the same outputs); :mod:`rlops.model.policy_io` saves and loads the
weights. The network's cheaper CPU kernels are in :mod:`rlops.model.fast_ops`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from rlops.model.fast_ops import Tanh, softmax_rows, sum_by_code
from rlops.model.masked_distributions import greedy_actions, gumbel_sample, masked_entropy, masked_log_probs, probs_of
from rlops.model.normalize import RunningMeanStd

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyConfig:
    """Shape and width of a :class:`PolicyNetwork`."""

    n_features: int
    """Number of encoded state features (``ObsLayout.n_features``)."""
    n_actions: int
    """Number of actions (``ObsLayout.n_actions``)."""
    history_len: int
    """How many past actions the observation carries (``ObsLayout.history_len``)."""
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the hidden layers of the actor and of the critic."""
    embed_dim: int = 16
    """Width of the action-history embedding and of the attention summary."""
    activation: str = "tanh"
    """``tanh`` or ``relu``."""
    obs_norm: bool = False
    """Standardise the state features with running statistics held in the network (buffers
    ``obs_rms.*``, saved and exported with the weights); the mask and history are left as they are."""
    obs_clip: float = 5.0
    """Bound on a standardised feature (``obs_norm`` only)."""
    action_roles: tuple[int, ...] = ()
    """Multi-agent scenarios (``roles:``): the role owning each action. The actor then has one head
    per role over a shared torso, and the head of the role whose actions are legal decides."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "hidden_sizes", tuple(int(h) for h in self.hidden_sizes))
        object.__setattr__(self, "action_roles", tuple(int(r) for r in self.action_roles))
        if self.action_roles and (len(self.action_roles) != self.n_actions or min(self.action_roles) < 0):
            raise ValueError(
                f"PolicyConfig.action_roles needs one role index >= 0 per action ({self.n_actions}), "
                f"got {list(self.action_roles)}"
            )
        if self.n_actions < 1 or self.n_features < 0 or self.history_len < 0:
            raise ValueError(
                f"PolicyConfig: need n_actions >= 1, n_features >= 0, history_len >= 0; got "
                f"{self.n_actions}, {self.n_features}, {self.history_len}"
            )
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"PolicyConfig.activation must be one of {sorted(_ACTIVATIONS)}, got '{self.activation}'")
        if not self.hidden_sizes or min(self.hidden_sizes) < 1 or self.embed_dim < 1:
            raise ValueError(
                f"PolicyConfig: hidden_sizes and embed_dim must be positive, got {self.hidden_sizes}, {self.embed_dim}"
            )

    @property
    def obs_dim(self) -> int:
        return self.n_features + self.n_actions + self.history_len

    @classmethod
    def from_layout(cls, layout: Any, **kwargs: Any) -> PolicyConfig:
        """Build from an environment's ``ObsLayout`` plus width settings."""
        kwargs.setdefault("action_roles", tuple(getattr(layout, "action_roles", ())))
        return cls(layout.n_features, layout.n_actions, layout.history_len, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        if self.action_roles:
            d["action_roles"] = list(self.action_roles)
        else:
            del d["action_roles"]  # a single-agent policy's file reads as it always has
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PolicyConfig:
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"PolicyConfig: unknown keys {unknown} (expected a subset of {sorted(known)})")
        return cls(
            **{
                **d,
                "hidden_sizes": tuple(d.get("hidden_sizes", (64, 64))),
                "action_roles": tuple(d.get("action_roles", ())),
            }
        )


_ACTIVATIONS: dict[str, type[nn.Module]] = {"tanh": Tanh, "relu": nn.ReLU}


@dataclass
class ActOutput:
    """One decision per observation: the action, its distribution and the critic's value."""

    action: Tensor
    probs: Tensor
    logp: Tensor
    entropy: Tensor
    value: Tensor

    def to_dict(self) -> dict[str, Any]:
        return {k: v.tolist() for k, v in asdict(self).items()}


def _mlp(sizes: list[int], act: type[nn.Module], out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        last = i == len(sizes) - 2
        nn.init.orthogonal_(lin.weight, out_gain if last else math.sqrt(2))
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if not last:
            layers.append(act())
    return nn.Sequential(*layers)


class RoleHeads(nn.Module):
    """The actor of a multi-agent policy: a shared torso and one output head per role. A row's
    logits come from the head of its acting role only, so the policy-gradient of a step reaches
    the torso and that head, never another role's head."""

    action_roles: Tensor  # a buffer: the role that owns each action

    def __init__(self, sizes: list[int], act: type[nn.Module], action_roles: tuple[int, ...]):
        super().__init__()
        self.torso = nn.Sequential(_mlp(sizes[:-1], act, out_gain=math.sqrt(2)), act())
        n_roles = max(action_roles) + 1
        self.heads = nn.ModuleList(_mlp(sizes[-2:], act, out_gain=0.01) for _ in range(n_roles))
        self.register_buffer("action_roles", torch.tensor(action_roles, dtype=torch.long), persistent=False)

    def role_of(self, mask: Tensor) -> Tensor:
        """The acting role of each row: the owner of its first legal action (only the acting
        role's actions are ever legal, see :meth:`rlops.sandbox.compile.CompiledScenario.action_masks`)."""
        return self.action_roles[mask.to(torch.uint8).argmax(dim=-1)]

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        z = self.torso(x)
        out = torch.stack([h(z) for h in self.heads], dim=0)  # [R, N, A]
        idx = self.role_of(mask).view(1, -1, 1).expand(1, out.shape[1], out.shape[2])
        return out.gather(0, idx).squeeze(0)


class PolicyNetwork(nn.Module):
    """Actor-critic over ``[features | mask | history]`` observations (see module docstring)."""

    def __init__(self, config: PolicyConfig):
        super().__init__()
        self.config = config
        F, A, k, E = config.n_features, config.n_actions, config.history_len, config.embed_dim
        self.n_features, self.n_actions, self.history_len, self.embed_dim = F, A, k, E
        self.use_history = k > 0
        act = _ACTIVATIONS[config.activation]
        self.action_embed = nn.Embedding(A + 1, E)
        self.pos_embed = nn.Parameter(torch.randn(max(k, 1), E) * 0.1)
        self.query = nn.Linear(F + A, E)
        self.key_value = nn.Linear(E, 2 * E)
        ctx_dim = E if self.use_history else 0
        hidden = list(config.hidden_sizes)
        if config.action_roles:
            self.actor: nn.Module = RoleHeads([F + A + ctx_dim, *hidden, A], act, config.action_roles)
        else:
            self.actor = _mlp([F + A + ctx_dim, *hidden, A], act, out_gain=0.01)
        self.critic = _mlp([F + A + ctx_dim, *hidden, 1], act, out_gain=1.0)
        self.obs_rms = RunningMeanStd(F) if config.obs_norm else None
        log.info("policy network: %d parameters (%s)", self.num_parameters(), config)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def split_obs(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``obs[N, D]`` → features ``[N, F]``, mask ``[N, A]`` (bool), history codes ``[N, k]`` (long)."""
        F, A = self.n_features, self.n_actions
        return obs[:, :F], obs[:, F : F + A] > 0.5, obs[:, F + A :].long()

    def normalized_features(self, obs: Tensor) -> Tensor:
        """The state features of ``obs`` as the network sees them (standardised when ``obs_norm``)."""
        features = obs[:, : self.n_features]
        return features if self.obs_rms is None else self.obs_rms.normalize(features, self.config.obs_clip)

    @torch.no_grad()
    def update_obs_stats(self, obs: Tensor) -> None:
        """Fold a batch of observations into the feature statistics (no-op without ``obs_norm``)."""
        if self.obs_rms is not None:
            self.obs_rms.update(obs[:, : self.n_features])

    def state_inputs(self, obs: Tensor) -> Tensor:
        """The state part of the network's input, ``[N, F + A]``: the features as the network sees
        them (:meth:`normalized_features`) and the action mask."""
        F, A = self.n_features, self.n_actions
        return torch.cat([self.normalized_features(obs), obs[:, F : F + A]], dim=-1)

    def history_codes(self, obs: Tensor) -> Tensor:
        """The last k action codes of ``obs`` (0: none, ``a + 1``: action ``a``), ``[N, k]`` long."""
        return obs[:, self.n_features + self.n_actions :].long().clamp(0, self.n_actions)

    def history_tables(self) -> tuple[Tensor, Tensor]:
        """Key and value tables of the history attention, each ``[A+1+k, E]``: a row per action code
        (``key_value(embed[code])``) then a row per position (``W_kv·pos[j]``); a token's key or value
        is the sum of its code's row and its position's row."""
        E = self.embed_dim
        code_kv = self.key_value(self.action_embed.weight)  # [A+1, 2E]
        pos_kv = self.pos_embed @ self.key_value.weight.t()  # [k, 2E]
        return torch.cat([code_kv[:, :E], pos_kv[:, :E]]), torch.cat([code_kv[:, E:], pos_kv[:, E:]])

    def _inputs(self, obs: Tensor) -> Tensor:
        A = self.n_actions
        state = self.state_inputs(obs)
        if not self.use_history:
            return state
        # Single-head attention: the state asks which of the last k actions matter now. A token's
        # key and value, key_value(embed[code] + pos[j]), are a row of a code table (A+1 rows) plus
        # a row of a position table (k rows), both computed once per batch. So a score q·key_j is
        # (q·code_keys)[code_j] + (q·pos_keys)[j] (a gather), and the summary Σ_j w_j·value_j is the
        # attention mass each code (a scatter-add of the weights) and each position received, times
        # the two value tables: every per-row tensor is [N, A+1+k] or narrower, never the [N, k, 2E]
        # of materialised keys and values (most of the cost of the policy on CPU; the same function).
        codes = self.history_codes(obs)
        table_k, table_v = self.history_tables()
        q = self.query(state) * (1.0 / math.sqrt(self.embed_dim))  # [N, E]
        q_table = q @ table_k.t()  # [N, A+1+k]: q against every code key and every position key
        scores = q_table[:, : A + 1].gather(1, codes) + q_table[:, A + 1 :]  # [N, k]
        weights = softmax_rows(scores)  # [N, k]
        code_mass = sum_by_code(weights, codes, A + 1)  # [N, A+1]
        ctx = torch.cat([code_mass, weights], dim=-1) @ table_v  # [N, E]
        return torch.cat([state, ctx], dim=-1)

    def forward(self, obs: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Masked log-probabilities ``[N, A]`` and values ``[N]``. ``mask`` defaults to the one in ``obs``."""
        if mask is None:
            mask = obs[:, self.n_features : self.n_features + self.n_actions] > 0.5
        x = self._inputs(obs)
        logits = self.actor(x, mask) if self.config.action_roles else self.actor(x)
        logp = masked_log_probs(logits, mask)
        return logp, self.critic(x).squeeze(-1)

    def get_value(self, obs: Tensor) -> Tensor:
        value: Tensor = self.critic(self._inputs(obs)).squeeze(-1)
        return value

    @torch.no_grad()
    def act(self, obs: Tensor, deterministic: bool = False, generator: torch.Generator | None = None) -> ActOutput:
        """Choose actions for one observation ``[D]`` or a batch ``[N, D]``."""
        single = obs.dim() == 1
        x = obs.unsqueeze(0) if single else obs
        x = x.to(next(self.parameters()).device, torch.float32)
        if x.shape[-1] != self.config.obs_dim:
            raise ValueError(
                f"observation has {x.shape[-1]} values; this policy expects "
                f"{self.config.obs_dim} (features {self.n_features} + mask {self.n_actions} + "
                f"history {self.history_len})"
            )
        mask = x[:, self.n_features : self.n_features + self.n_actions] > 0.5
        logp, value = self.forward(x, mask)
        action = greedy_actions(logp) if deterministic else gumbel_sample(logp, generator)
        p = probs_of(logp, mask)
        out = ActOutput(action, p, logp.gather(1, action.unsqueeze(1)).squeeze(1), masked_entropy(logp, mask, p), value)
        if single:
            out = ActOutput(*(t.squeeze(0) for t in (out.action, out.probs, out.logp, out.entropy, out.value)))
        return out


def as_act_fn(policy: PolicyNetwork, deterministic: bool = True, seed: int = 0) -> Any:
    """Adapt a policy to ``act(env) -> actions`` over a batched environment (``rlops.sandbox.policies``)."""
    gen: dict[str, torch.Generator] = {}

    def act(env: Any) -> Tensor:
        g = None if deterministic else gen.setdefault("g", torch.Generator(env.device).manual_seed(seed))
        return policy.act(env.observe(), deterministic=deterministic, generator=g).action.to(env.device)

    return act


__all__ = [
    "PolicyConfig",
    "PolicyNetwork",
    "RoleHeads",
    "ActOutput",
    "as_act_fn",
]
