"""A policy outside the training process: saved to a folder and loaded back, or exported as a
``torch.export`` program for serving.

A saved policy folder holds ``policy.pt`` (the state dict, loaded with ``weights_only=True``),
``policy.json`` (the :class:`~rlops.model.policy.PolicyConfig` and metadata) and ``policy.npz`` (the
same tensors as numpy arrays: what an agent without torch serves, see
:mod:`rlops.agent_sdk.numpy_policy`). :func:`export_policy` writes the greedy serving head
(:class:`ServingPolicy`), whose outputs are :meth:`PolicyNetwork.act`'s with ``deterministic=True``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from rlops.model.masked_distributions import greedy_actions, masked_entropy, probs_of
from rlops.model.policy import PolicyConfig, PolicyNetwork

WEIGHTS_FILE = "policy.pt"
CONFIG_FILE = "policy.json"
NUMPY_WEIGHTS_FILE = "policy.npz"
"""The state dict as numpy arrays (``numpy.savez``, no pickles), for serving without torch."""
_FORMAT = 1


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
    "CONFIG_FILE",
    "NUMPY_WEIGHTS_FILE",
    "WEIGHTS_FILE",
    "SavedPolicy",
    "ServingPolicy",
    "export_policy",
    "load_exported",
    "load_policy",
    "policy_metadata",
    "save_policy",
]
