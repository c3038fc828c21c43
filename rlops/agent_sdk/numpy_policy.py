"""A trained policy served without torch: the network's forward pass in numpy.

``rlops.model.policy_io.save_policy`` writes ``policy.npz`` (every weight and buffer of the network,
by its state-dict name) beside ``policy.pt`` and ``policy.json``; a registered version carries the
folder as ``artifacts/policy/`` of its pyfunc model. :class:`NumpyPolicy` loads that folder and
answers :meth:`NumpyPolicy.predict_obs` exactly as the pyfunc does (greedy action, masked
probabilities, log-probability, entropy, value), to float32 rounding of the torch network.

The forward pass is :class:`rlops.model.policy.PolicyNetwork`'s, step by step: features
standardised when ``obs_norm``; single-head attention of the state over the last ``k`` actions
through the code and position key/value tables; actor (one head per role for ``roles:``) and
critic MLPs; masked log-softmax with a large finite negative on masked actions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

#: Files of a saved policy folder (``rlops.model.policy``) and where a pyfunc model keeps it
#: (``rlops.registry.pyfunc_policy.POLICY_ARTIFACT``); spelled here because an agent
#: host has neither module's dependencies.
CONFIG_FILE = "policy.json"
NUMPY_WEIGHTS_FILE = "policy.npz"
PYFUNC_POLICY_DIR = ("artifacts", "policy")

_EPS = 1e-8  # rlops.model.normalize.EPS
_EXP_FLOOR = -87.0  # rlops.model.masked_distributions.EXP_FLOOR
_MASKED = float(np.finfo(np.float32).min) / 2  # rlops.model.masked_distributions.mask_value(float32)


class NumpyExportMissing(ValueError):
    """A saved policy folder without ``policy.npz`` (saved before numpy exports were written)."""


def _tanh(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.tanh(x)
    return out


def _relu(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.maximum(x, np.float32(0.0))
    return out


_ACTIVATIONS = {"tanh": _tanh, "relu": _relu}


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=1, keepdims=True)
    out: np.ndarray = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return out


class _Mlp:
    """``Linear → act → … → Linear`` (``act_last``: an activation after the last layer too)."""

    def __init__(self, weights: dict[str, np.ndarray], prefix: str, act: Any, act_last: bool = False):
        idx = sorted(
            int(k[len(prefix) :].split(".")[0]) for k in weights if k.startswith(prefix) and k.endswith(".weight")
        )
        if not idx:
            raise ValueError(f"policy weights hold no layer under {prefix!r}")
        self.layers = [(weights[f"{prefix}{i}.weight"].T.copy(), weights[f"{prefix}{i}.bias"]) for i in idx]
        self.act, self.act_last = act, act_last

    def __call__(self, x: np.ndarray) -> np.ndarray:
        last = len(self.layers) - 1
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < last or self.act_last:
                x = self.act(x)
        return x


class NumpyPolicy:
    """The greedy serving head of a saved policy, in numpy (float32)."""

    def __init__(self, config: dict[str, Any], weights: dict[str, np.ndarray], metadata: dict[str, Any]):
        w = {k: np.asarray(v, dtype=np.float32) for k, v in weights.items()}
        self.config, self.metadata = config, metadata
        self.action_names: list[str] = list(metadata.get("action_names", []))
        self.obs_columns: list[str] = list(metadata.get("obs_columns", []))
        F, A, k = int(config["n_features"]), int(config["n_actions"]), int(config["history_len"])
        E = int(config.get("embed_dim", 16))
        self.F, self.A, self.k, self.E = F, A, k, E
        act = _ACTIVATIONS[str(config.get("activation", "tanh"))]
        self.obs_dim = F + A + k
        self.obs_clip = float(config.get("obs_clip", 5.0))
        self.norm: tuple[np.ndarray, np.ndarray] | None = None
        if config.get("obs_norm"):
            self.norm = (w["obs_rms.mean"], np.sqrt(w["obs_rms.var"] + np.float32(_EPS)))
        if k > 0:
            kv_w, kv_b = w["key_value.weight"], w["key_value.bias"]
            code_kv = w["action_embed.weight"] @ kv_w.T + kv_b  # [A+1, 2E]
            pos_kv = w["pos_embed"] @ kv_w.T  # [k, 2E]
            self.table_k = np.concatenate([code_kv[:, :E], pos_kv[:, :E]]).T.copy()  # [E, A+1+k]
            self.table_v = np.concatenate([code_kv[:, E:], pos_kv[:, E:]])  # [A+1+k, E]
            self.query = (
                w["query.weight"].T * np.float32(1.0 / math.sqrt(E)),
                w["query.bias"] * np.float32(1.0 / math.sqrt(E)),
            )
        self.roles = tuple(int(r) for r in config.get("action_roles", ()))
        if self.roles:
            self.torso = _Mlp(w, "actor.torso.0.", act, act_last=True)
            n_roles = max(self.roles) + 1
            self.heads = [_Mlp(w, f"actor.heads.{r}.", act) for r in range(n_roles)]
            self.action_role = np.asarray(self.roles, dtype=np.int64)
        else:
            self.actor = _Mlp(w, "actor.", act)
        self.critic = _Mlp(w, "critic.", act)

    @classmethod
    def load(cls, directory: str | Path) -> NumpyPolicy:
        """Load a folder written by ``save_policy`` (``policy.json`` and ``policy.npz``)."""
        d = Path(directory)
        if not (d / CONFIG_FILE).is_file():
            raise FileNotFoundError(f"{d / CONFIG_FILE}: missing; a saved policy folder holds {CONFIG_FILE}")
        if not (d / NUMPY_WEIGHTS_FILE).is_file():
            raise NumpyExportMissing(
                f"{d}: no {NUMPY_WEIGHTS_FILE} (a policy saved before numpy exports were written); serve it with "
                "torch installed, or register it again (rlops.model.policy_io.save_policy writes the export)"
            )
        doc = json.loads((d / CONFIG_FILE).read_text())
        with np.load(d / NUMPY_WEIGHTS_FILE, allow_pickle=False) as npz:
            weights = {k: npz[k] for k in npz.files}
        return cls(doc["config"], weights, doc.get("metadata", {}))

    @classmethod
    def load_pyfunc(cls, model_dir: str | Path) -> NumpyPolicy:
        """Load the policy inside a downloaded pyfunc model folder (``artifacts/policy/``)."""
        return cls.load(Path(model_dir).joinpath(*PYFUNC_POLICY_DIR))

    def _inputs(self, obs: np.ndarray) -> np.ndarray:
        F, A = self.F, self.A
        features = obs[:, :F]
        if self.norm is not None:
            mean, std = self.norm
            features = np.clip((features - mean) / std, -self.obs_clip, self.obs_clip)
        state = np.concatenate([features, obs[:, F : F + A]], axis=1)
        if self.k == 0:
            return state
        codes = np.clip(obs[:, F + A :].astype(np.int64), 0, A)  # [N, k]
        q = state @ self.query[0] + self.query[1]  # [N, E], scaled by 1/sqrt(E)
        q_table = q @ self.table_k  # [N, A+1+k]
        scores = np.take_along_axis(q_table[:, : A + 1], codes, axis=1) + q_table[:, A + 1 :]
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights = e / e.sum(axis=1, keepdims=True)  # [N, k]
        code_mass = np.zeros((obs.shape[0], A + 1), dtype=np.float32)
        np.add.at(code_mass, (np.arange(obs.shape[0])[:, None], codes), weights)
        ctx = np.concatenate([code_mass, weights], axis=1) @ self.table_v  # [N, E]
        return np.concatenate([state, ctx], axis=1)

    def predict_obs(self, obs: np.ndarray) -> dict[str, np.ndarray]:
        """``obs[N, D]`` → ``action_index``, ``probs[N, A]``, ``logp``, ``entropy``, ``value``: the
        pyfunc model's :meth:`predict_obs`, in numpy."""
        x = np.asarray(obs, dtype=np.float32).reshape(-1, self.obs_dim)
        mask = x[:, self.F : self.F + self.A] > 0.5
        h = self._inputs(x)
        if self.roles:
            z = self.torso(h)
            role = self.action_role[mask.astype(np.uint8).argmax(axis=1)]
            logits = np.stack([head(z) for head in self.heads])[role, np.arange(x.shape[0])]
        else:
            logits = self.actor(h)
        logp = _log_softmax(np.where(mask, logits, np.float32(_MASKED)))
        value = self.critic(h)[:, 0]
        action = logp.argmax(axis=1)
        probs = np.where(mask, np.exp(np.maximum(logp, np.float32(_EXP_FLOOR))), np.float32(0.0))
        rows = np.arange(x.shape[0])
        return {
            "action_index": action,
            "probs": probs.astype(np.float32),
            "logp": logp[rows, action].astype(np.float32),
            "entropy": -np.where(mask, probs * logp, np.float32(0.0)).sum(axis=1).astype(np.float32),
            "value": value.astype(np.float32),
        }


__all__ = ["NUMPY_WEIGHTS_FILE", "NumpyExportMissing", "NumpyPolicy"]
