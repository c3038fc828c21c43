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
* applies the mask to the logits with a large *finite* negative (never ``-inf``): a masked action
  gets probability 0, log-probabilities stay finite, and a row with every action masked yields a
  uniform distribution instead of NaN.

Serving goes through :meth:`PolicyNetwork.act` (eager) or :func:`export_policy` (a ``torch.export``
program with the same outputs); weights travel as ``policy.pt`` (state dict, loaded with
``weights_only=True``) next to ``policy.json`` (the :class:`PolicyConfig`) and ``policy.npz`` (the
same tensors as numpy arrays: what an agent without torch serves, see
:mod:`rlops.agent_sdk.numpy_policy`).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rlops.model.normalize import RunningMeanStd

log = logging.getLogger(__name__)

WEIGHTS_FILE = "policy.pt"
CONFIG_FILE = "policy.json"
NUMPY_WEIGHTS_FILE = "policy.npz"
"""The state dict as numpy arrays (``numpy.savez``, no pickles), for serving without torch."""
_FORMAT = 1


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


class _TanhFromSigmoid(torch.autograd.Function):
    """``tanh(x) = 2·σ(2x) − 1`` forward, ``tanh``'s own backward ``g·(1 − y²)`` from the output."""

    generate_vmap_rule = True  # per-sample gradients (EWC's Fisher) vmap over it

    @staticmethod
    def forward(x: Tensor) -> Tensor:
        return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor], output: Tensor) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        grad_in: Tensor = torch.ops.aten.tanh_backward(grad, y)
        return grad_in


def fast_tanh(x: Tensor) -> Tensor:
    """``tanh`` as ``2·σ(2x) − 1``: the same function to within 2e-7 (absolute, float32), about five
    times cheaper on CPU, where ATen's ``tanh`` kernel costs more than the matrix product it follows
    and dominated the cost of training a small policy."""
    if torch.is_grad_enabled() and x.requires_grad:
        y: Tensor = _TanhFromSigmoid.apply(x)  # type: ignore[no-untyped-call]  # torch leaves Function.apply untyped
        return y
    return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)


class Tanh(nn.Module):
    """The hidden activation ``tanh`` computed by :func:`fast_tanh` (no parameters: a saved policy's
    weights load as they did with ``nn.Tanh``)."""

    def forward(self, x: Tensor) -> Tensor:
        return fast_tanh(x)


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


# ---------------------------------------------------------------------------- masked distributions
def mask_value(dtype: torch.dtype) -> float:
    """The logit given to masked actions: very negative but finite, so no op produces NaN."""
    return torch.finfo(dtype).min / 2


def masked_logits(logits: Tensor, mask: Tensor) -> Tensor:
    return logits.masked_fill(~mask, mask_value(logits.dtype))


def softmax_rows(x: Tensor, log: bool = False) -> Tensor:
    """(Log-)softmax of each row of ``x[N, C]`` for a handful of columns ``C``.

    ATen's kernel over a short last dimension runs one row at a time; over dimension 0 of the
    transposed view it vectorises across the rows: the same values (log-softmax bit for bit), about
    seven times cheaper forward and four times backward for ``C`` ≈ 4–8 on CPU."""
    if x.dim() != 2:
        return torch.log_softmax(x, dim=-1) if log else torch.softmax(x, dim=-1)
    xt = x.t()
    return (torch.log_softmax(xt, dim=0) if log else torch.softmax(xt, dim=0)).t()


def sum_by_code(values: Tensor, codes: Tensor, n_codes: int) -> Tensor:
    """``out[i, c] = Σ_j values[i, j] · [codes[i, j] == c]``, ``[N, n_codes]``, for ``values`` and
    ``codes`` of shape ``[N, k]``. A scatter-add on CPU; on an accelerator, whose scatter-add adds
    atomically in no fixed order, a one-hot product, so a seeded run gives the same numbers."""
    if values.device.type == "cpu":
        return values.new_zeros(values.shape[0], n_codes).scatter_add_(1, codes, values)
    one_hot = codes.unsqueeze(-1) == torch.arange(n_codes, device=codes.device)
    return (values.unsqueeze(-1) * one_hot).sum(1)


def masked_log_probs(logits: Tensor, mask: Tensor) -> Tensor:
    """Log-probabilities over legal actions; masked entries are very negative (finite)."""
    return softmax_rows(masked_logits(logits, mask), log=True)


EXP_FLOOR = -87.0
"""The lowest exponent :func:`probs_of` passes to ``exp``: ``exp(-87)`` ≈ 1.6e-38 is still a normal
float32; below it the result underflows to a denormal or to 0."""


def probs_of(logp: Tensor, mask: Tensor | None = None) -> Tensor:
    """``exp(logp)`` of masked log-probabilities, with the masked entries exactly 0 when ``mask``
    is given (without it they are ~1.6e-38: for callers that zero them anyway).

    A masked entry's log-probability is ~-1.7e38, and ATen's CPU ``exp`` takes a slow path for
    every input whose result underflows: a tensor with masked entries cost it 4–8 times as much
    as one without. So the exponent is floored at :data:`EXP_FLOOR` first; a legal action's
    probability is unchanged unless it is below 1.6e-38, where it reads as 1.6e-38."""
    p = logp.clamp_min(EXP_FLOOR).exp_()
    return p if mask is None else p.masked_fill_(~mask, 0.0)


def greedy_actions(logp: Tensor) -> Tensor:
    """The most likely action of each row of ``logp[N, A]`` (the first one on a tie).

    :func:`softmax_rows` hands back a transposed view, and ``argmax`` over a strided last
    dimension runs ~7 times slower than over a contiguous one: the copy costs less."""
    return logp.contiguous().argmax(dim=-1)


def masked_entropy(logp: Tensor, mask: Tensor, probs: Tensor | None = None) -> Tensor:
    """Entropy of the distribution restricted to legal actions (masked terms contribute 0);
    ``probs`` is :func:`probs_of` ``(logp)`` where the caller has it already."""
    p = probs_of(logp) if probs is None else probs
    return -torch.where(mask, p * logp, torch.zeros_like(logp)).sum(-1)


def gumbel_sample(logp: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Sample one action per row by the Gumbel-max trick (cheaper than ``multinomial``)."""
    u = torch.rand(logp.shape, generator=generator, device=logp.device, dtype=logp.dtype)
    g = -torch.log(-torch.log(u.clamp_(1e-20, 1.0 - 1e-7)))
    # g + logp in g's own (contiguous) memory: the same sums as logp + g, whose result would take
    # logp's transposed layout and make the argmax ~7 times slower (see greedy_actions).
    return g.add_(logp).argmax(dim=-1)


# ---------------------------------------------------------------------------- network
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


# ---------------------------------------------------------------------------- serving export
class ServingPolicy(nn.Module):
    """Greedy serving head: ``obs[N, D] → (action, probs, logp, entropy, value)``; exportable."""

    def __init__(self, policy: PolicyNetwork):
        super().__init__()
        self.policy = policy
        self.n_features = policy.n_features
        self.n_actions = policy.n_actions

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        mask = obs[:, self.n_features : self.n_features + self.n_actions] > 0.5
        logp, value = self.policy(obs, mask)
        action = greedy_actions(logp)
        p = probs_of(logp, mask)
        return action, p, logp.gather(1, action.unsqueeze(1)).squeeze(1), masked_entropy(logp, mask, p), value


def export_policy(policy: PolicyNetwork, path: str | Path | None = None) -> torch.export.ExportedProgram:
    """Export the greedy serving head with ``torch.export`` (CPU, eval mode, any batch size).

    ``path`` (conventionally ``*.pt2``) receives the program via ``torch.export.save``; load it
    back with :func:`load_exported`, which returns a callable module.
    """
    import copy

    serving = ServingPolicy(copy.deepcopy(policy).cpu().eval())
    example = torch.zeros(2, policy.config.obs_dim)
    example[:, policy.n_features] = 1.0  # one legal action, like a real observation
    batch = torch.export.Dim("batch", min=1, max=1 << 20)
    program = torch.export.export(serving, (example,), dynamic_shapes={"obs": {0: batch}})
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        torch.export.save(program, str(path))
    return program


def load_exported(path: str | Path) -> nn.Module:
    """Load a program written by :func:`export_policy`; call it as ``module(obs[N, D])``."""
    return torch.export.load(str(path)).module()


# ---------------------------------------------------------------------------- save / load
@dataclass
class SavedPolicy:
    """Where :func:`save_policy` wrote a policy and what it holds."""

    directory: Path
    weights: Path
    config: Path
    n_parameters: int
    metadata: dict[str, Any] = field(default_factory=dict)


def save_policy(policy: PolicyNetwork, directory: str | Path, metadata: dict[str, Any] | None = None) -> SavedPolicy:
    """Write ``policy.pt`` (state dict), ``policy.npz`` (the same tensors for numpy serving) and
    ``policy.json`` (config + metadata) into ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in policy.state_dict().items()}
    torch.save(state, d / WEIGHTS_FILE)
    with (d / NUMPY_WEIGHTS_FILE).open("wb") as fh:
        np.savez(fh, **{k: v.numpy() for k, v in state.items()})
    doc = {
        "format": _FORMAT,
        "config": policy.config.to_dict(),
        "n_parameters": policy.num_parameters(),
        "metadata": metadata or {},
    }
    (d / CONFIG_FILE).write_text(json.dumps(doc, indent=2, sort_keys=True))
    return SavedPolicy(
        directory=d,
        weights=d / WEIGHTS_FILE,
        config=d / CONFIG_FILE,
        n_parameters=policy.num_parameters(),
        metadata=metadata or {},
    )


def load_policy(directory: str | Path, device: str | torch.device = "cpu") -> PolicyNetwork:
    """Load a policy written by :func:`save_policy` (tensors only: ``weights_only=True``)."""
    d = Path(directory)
    for f in (CONFIG_FILE, WEIGHTS_FILE):
        if not (d / f).exists():
            raise FileNotFoundError(f"{d / f}: missing; a saved policy folder holds {CONFIG_FILE} and {WEIGHTS_FILE}")
    doc = json.loads((d / CONFIG_FILE).read_text())
    if doc.get("format") != _FORMAT:
        raise ValueError(f"{d / CONFIG_FILE}: policy format {doc.get('format')!r}, expected {_FORMAT}")
    policy = PolicyNetwork(PolicyConfig.from_dict(doc["config"]))
    policy.load_state_dict(torch.load(d / WEIGHTS_FILE, map_location="cpu", weights_only=True))
    return policy.to(device)


def policy_metadata(directory: str | Path) -> dict[str, Any]:
    """The ``metadata`` block saved with a policy (reward-fn version, training budget, …)."""
    metadata: dict[str, Any] = json.loads((Path(directory) / CONFIG_FILE).read_text()).get("metadata", {})
    return metadata


__all__ = [
    "PolicyConfig",
    "PolicyNetwork",
    "RoleHeads",
    "ActOutput",
    "Tanh",
    "fast_tanh",
    "as_act_fn",
    "ServingPolicy",
    "SavedPolicy",
    "mask_value",
    "masked_logits",
    "softmax_rows",
    "masked_log_probs",
    "sum_by_code",
    "masked_entropy",
    "gumbel_sample",
    "probs_of",
    "greedy_actions",
    "EXP_FLOOR",
    "NUMPY_WEIGHTS_FILE",
    "export_policy",
    "load_exported",
    "save_policy",
    "load_policy",
    "policy_metadata",
]
