"""Serve the ``champion`` policy (and a ``challenger`` split) to a production agent, with the
scenario's rule engine as the fallback.

::

    from rlops.agent_sdk.policy_client import PolicyClient

    client = PolicyClient("http://mlflow:5000", "credit_approval", "scenarios/credit_approval",
                          timeout_ms=50)
    decision = client.decide(state, key=applicant_id, history=actions_so_far)
    episode = current_episode()                                 # inside an @rollout function
    episode.set(test_group=decision.test_group, policy_version=decision.policy_version)
    episode.annotate(**decision.trace_fields())                 # mask, logp, entropy, value, fallback
    executor.execute(decision.action, state)

* The policies are the registered versions behind the aliases ``champion`` and ``challenger``
  of ``<scenario>-policy`` (MLflow pyfunc models, see ``rlops/pipeline_steps/infra/pyfunc_policy.py``),
  downloaded and loaded once (and again on :meth:`PolicyClient.refresh`).
* A request goes to the challenger when a stable hash of its ``key`` (e.g. the user id) falls
  below the challenger's traffic fraction: the model version tag ``traffic_fraction`` written
  by a staged promotion, unless ``challenger_fraction`` is given. The same key always lands in
  the same group; requests without a key go to the champion.
* Any error (no policy loaded, a state the encoder cannot read, an exception in the model, an
  illegal action) or a decision slower than ``timeout_ms`` returns the rule engine's action
  instead, with ``fallback=True`` and the reason; :attr:`PolicyClient.fallbacks` counts them.

The state is the production state as a nested dict (or flattened ``state.<path>`` keys), with
the scenario's field names; it is encoded exactly as the sandbox encodes its own states
(:class:`ObservationEncoder`). Needs the scenario pack (for the encoding and the rule engine),
torch, and MLflow (imported when the policies are loaded).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlops.agent_sdk.tracer import flatten_state

log = logging.getLogger(__name__)

CHAMPION, CHALLENGER = "champion", "challenger"
TRAFFIC_TAG = "traffic_fraction"
RULES_VERSION = "rules"


def observation_columns(layout: Any, action_names: Sequence[str]) -> list[str]:
    """Column names of the encoded observation ``[features | mask | history]``."""
    return ([*layout.feature_names] + [f"mask.{a}" for a in action_names]
            + [f"history.{i}" for i in range(layout.history_len)])


def hash_fraction(key: str, salt: str = "") -> float:
    """A stable number in [0, 1) for ``key`` (the same on every host and run)."""
    digest = hashlib.sha256(f"{salt}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64


class StateError(ValueError):
    """A production state the scenario's encoder cannot read."""


class ObservationEncoder:
    """Production states → the sandbox's state tensor, action masks and observations."""

    def __init__(self, pack: Any):
        self.pack = pack
        self.scenario = scn = pack.scenario
        self.action_names: tuple[str, ...] = tuple(scn.action_names)
        self.columns = observation_columns(scn.layout, self.action_names)
        self._fields = [f for f in scn.spec.fields if f.observed]
        self._optional = set(scn.visible)  # hidden until their visible_when holds

    def state_tensor(self, state: Mapping[str, Any], history: Sequence[str] = (), step: int | None = None,
                     elapsed_ms: float = 0.0, last_error: bool = False, strict: bool = True) -> torch.Tensor:
        """One row ``S[1, C]`` for a production state and the actions taken so far. Not ``strict``:
        what cannot be read (a missing or bad field, an unknown action) is left at 0 instead of
        raising — the best-effort state the rule-engine fallback decides on."""
        scn = self.scenario
        if not isinstance(state, Mapping):
            if strict:
                raise StateError(f"state is a {type(state).__name__}, expected a mapping of field names")
            state = {}
        flat = {k[len("state."):]: v for k, v in flatten_state(state).items()}
        S = torch.zeros((1, scn.n_cols), dtype=torch.float32)
        missing = []
        for f in self._fields:
            v = flat.get(f.path)
            if v is None or (isinstance(v, float) and np.isnan(v)):
                if f.path not in self._optional:
                    missing.append(f.path)
                continue
            try:
                S[0, scn.columns[f.path]] = self._code(f, v)
            except StateError:
                if strict:
                    raise
        if missing and strict:
            raise StateError(f"state lacks field(s) {missing}; the scenario {scn.spec.name} needs every "
                             "observed field that has no visible_when condition")
        if not strict:
            history = [a for a in history if isinstance(a, str) and a in self.action_names]
            step = step if isinstance(step, int) and not isinstance(step, bool) else None
            elapsed_ms = float(elapsed_ms) if isinstance(elapsed_ms, (int, float)) and np.isfinite(elapsed_ms) else 0.0
        codes = [self._action_code(a) for a in history]
        run = 0
        for c in reversed(codes):
            if c != codes[-1]:
                break
            run += 1
        c = scn.columns
        S[0, c["episode.step"]] = float(len(codes) if step is None else step)
        S[0, c["episode.elapsed_ms"]] = float(elapsed_ms)
        S[0, c["episode.last_action"]] = float(codes[-1]) if codes else 0.0
        S[0, c["episode.repeat_count"]] = float(max(run - 1, 0))
        S[0, c["episode.error"]] = float(bool(last_error))
        return scn.clamp(S)

    def history_tensor(self, history: Sequence[str]) -> torch.Tensor:
        k = self.scenario.layout.history_len
        codes = [self._action_code(a) for a in history][-k:] if k else []
        return torch.tensor([[0] * (k - len(codes)) + codes], dtype=torch.long)

    def encode(self, state: Mapping[str, Any], history: Sequence[str] = (), step: int | None = None,
               elapsed_ms: float = 0.0, last_error: bool = False, strict: bool = True
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(S[1, C], mask[1, A], obs[1, D])`` for one production state (see :meth:`state_tensor`)."""
        S = self.state_tensor(state, history, step, elapsed_ms, last_error, strict)
        if not strict:
            history = [a for a in history if isinstance(a, str) and a in self.action_names]
        mask = self.scenario.action_masks(S)
        return S, mask, self.scenario.encode(S, mask, self.history_tensor(history))

    def rule_action(self, S: torch.Tensor, mask: torch.Tensor) -> int:
        return int(self.scenario.rule_actions(S, mask)[0])

    def _code(self, f: Any, v: Any) -> float:
        if f.type == "enum":
            if v not in f.values:
                raise StateError(f"state field {f.path} = {v!r} is not one of {list(f.values)}")
            return float(f.values.index(v))
        if f.type == "bool":
            return float(bool(v))
        try:
            return float(v)
        except (TypeError, ValueError):
            raise StateError(f"state field {f.path} = {v!r}: expected a number") from None

    def _action_code(self, action: str) -> int:
        if action not in self.action_names:
            raise StateError(f"history holds unknown action {action!r}; actions: {list(self.action_names)}")
        return self.action_names.index(action) + 1


@dataclass
class Decision:
    """The action to execute and what to record about it."""

    action: str
    action_index: int
    mask: list[bool]
    probs: dict[str, float] | None
    logp: float | None
    entropy: float | None
    value: float | None
    policy_version: str
    test_group: str
    fallback: bool = False
    reason: str | None = None
    latency_ms: float = 0.0

    def trace_fields(self) -> dict[str, Any]:
        """Step fields for ``Episode.annotate`` (the trace record's mask, logp, … columns)."""
        out: dict[str, Any] = {"action_mask": self.mask, "fallback": self.fallback}
        for k in ("logp", "entropy", "value"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out


@dataclass
class LoadedPolicy:
    """One registered version, loaded and ready to decide."""

    alias: str
    version: str
    model: Any
    """Has ``predict_obs(obs[N, D]) -> {"action_index", "probs", "logp", "entropy", "value"}``."""
    tags: dict[str, str] = field(default_factory=dict)


class PolicyClient:
    """Decisions from the ``champion``/``challenger`` policies with a rule-engine fallback.

    Args:
        tracking_uri: the MLflow tracking (and registry) URI.
        scenario: scenario name; the registered model is ``<scenario>-policy``.
        pack_path: the scenario pack folder (encoding and the rule engine).
        challenger_fraction: share of keys routed to the challenger; None reads the
            challenger version's ``traffic_fraction`` tag (0 when absent).
        timeout_ms: a policy decision slower than this falls back to the rule engine.
        load: load the policies now (otherwise call :meth:`refresh`).
        http_max_retries, http_timeout_s: bounds on MLflow server calls while loading (MLflow's
            own defaults retry for minutes); variables the deployment set itself win.
    """

    def __init__(self, tracking_uri: str, scenario: str, pack_path: str | Path,
                 challenger_fraction: float | None = None, timeout_ms: float = 50.0, load: bool = True,
                 model_name: str | None = None, http_max_retries: int = 2, http_timeout_s: int = 10):
        from rlops.sandbox.pack import load_pack
        self.tracking_uri, self.scenario = tracking_uri, scenario
        self.model_name = model_name or f"{scenario}-policy"
        self.encoder = ObservationEncoder(load_pack(pack_path, check_liveness=False))
        self.challenger_fraction_override = challenger_fraction
        self.timeout_s = float(timeout_ms) / 1000.0
        self._http_env = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(int(http_max_retries)),
                          "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(http_timeout_s)),
                          "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1"}
        self.policies: dict[str, LoadedPolicy] = {}
        self.load_errors: dict[str, str] = {}
        self.fallbacks: collections.Counter[str] = collections.Counter()
        self.decisions = 0
        self._lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="policy")
        self._cache = Path(tempfile.mkdtemp(prefix="rlops-policy-"))
        if load:
            self.refresh()

    # ------------------------------------------------------------------ loading
    def refresh(self) -> dict[str, str | None]:
        """(Re)load the versions behind ``champion`` and ``challenger``; returns alias → version.
        A failure keeps the policy loaded before (if any) and is kept in :attr:`load_errors`."""
        for alias in (CHAMPION, CHALLENGER):
            try:
                with self._http_limits():
                    loaded = self._load(alias)
            except Exception as exc:  # noqa: BLE001 - any failure means "serve what we have"
                self.load_errors[alias] = f"{type(exc).__name__}: {exc}"
                log.warning("policy client: cannot load %s of %s: %s", alias, self.model_name, exc)
                continue
            with self._lock:
                if loaded is None:
                    self.policies.pop(alias, None)
                else:
                    self.policies[alias] = loaded
            self.load_errors.pop(alias, None)
        return {a: (p.version if (p := self.policies.get(a)) else None) for a in (CHAMPION, CHALLENGER)}

    @contextlib.contextmanager
    def _http_limits(self) -> Iterator[None]:
        added = [k for k in self._http_env if k not in os.environ]
        os.environ.update({k: self._http_env[k] for k in added})
        try:
            yield
        finally:
            for k in added:
                os.environ.pop(k, None)

    def _load(self, alias: str) -> LoadedPolicy | None:
        import mlflow.pyfunc
        from mlflow import MlflowClient
        from mlflow.exceptions import MlflowException
        client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
        try:
            mv = client.get_model_version_by_alias(self.model_name, alias)
        except MlflowException as exc:
            if str(getattr(exc, "error_code", "")) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None  # no such alias (yet): nothing to serve for it
            raise
        current = self.policies.get(alias)
        if current is not None and current.version == str(mv.version):
            current.tags = dict(mv.tags)
            return current
        source = str(mv.source)
        if not source.startswith("runs:/"):
            raise ValueError(f"{self.model_name} v{mv.version}: unsupported model source {source!r}")
        run_id, _, path = source[len("runs:/"):].partition("/")
        dst = self._cache / f"v{mv.version}"
        local = client.download_artifacts(run_id, path, str(dst))
        model = mlflow.pyfunc.load_model(local).unwrap_python_model()
        if list(model.obs_columns) != self.encoder.columns:
            raise ValueError(f"{self.model_name} v{mv.version} expects another observation layout than the "
                             f"pack {self.scenario} (trained on a different scenario version)")
        return LoadedPolicy(alias, str(mv.version), model, dict(mv.tags))

    @property
    def challenger_fraction(self) -> float:
        if self.challenger_fraction_override is not None:
            return float(self.challenger_fraction_override)
        ch = self.policies.get(CHALLENGER)
        try:
            return float(ch.tags.get(TRAFFIC_TAG, 0.0)) if ch else 0.0
        except ValueError:
            return 0.0

    # ------------------------------------------------------------------ deciding
    def route(self, key: str | None) -> str:
        """``challenger`` or ``champion`` for a request key (stable)."""
        if key is None or CHALLENGER not in self.policies:
            return CHAMPION
        return CHALLENGER if hash_fraction(str(key), self.scenario) < self.challenger_fraction else CHAMPION

    def decide(self, state: Mapping[str, Any], key: str | None = None, history: Sequence[str] = (),
               step: int | None = None, elapsed_ms: float = 0.0, last_error: bool = False) -> Decision:
        """Choose the action for ``state``; never raises for a bad state or a failing policy."""
        t0 = time.perf_counter()
        self.decisions += 1
        group = self.route(key)
        try:
            S, mask, obs = self.encoder.encode(state, history, step, elapsed_ms, last_error)
        except (StateError, TypeError, ValueError) as exc:
            # The policy must not see a state it cannot read; the rule engine decides on what
            # can be read (unreadable fields at 0), as documented, and the decision says why.
            S, mask, _ = self.encoder.encode(state, history, step, elapsed_ms, last_error, strict=False)
            return self._fallback(S, mask, group, "bad_state", f"unreadable state: {exc}", t0)
        policy = self.policies.get(group) or self.policies.get(CHAMPION)
        if policy is None:
            return self._fallback(S, mask, group, "no_policy", "no champion policy loaded: "
                                  + self.load_errors.get(CHAMPION, "the alias does not exist"), t0)
        future = self._pool.submit(policy.model.predict_obs, obs.numpy())
        try:
            out = future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return self._fallback(S, mask, group, "timeout",
                                  f"policy v{policy.version} took over {self.timeout_s * 1000:.0f} ms", t0)
        except Exception as exc:  # noqa: BLE001 - any model failure falls back
            return self._fallback(S, mask, group, "error", f"policy v{policy.version} failed: "
                                  f"{type(exc).__name__}: {exc}", t0)
        a = int(out["action_index"][0])
        legal = mask[0].tolist()
        if not 0 <= a < len(legal) or not legal[a]:
            return self._fallback(S, mask, group, "illegal_action",
                                  f"policy v{policy.version} chose an illegal action ({a})", t0)
        probs = np.asarray(out["probs"])[0]
        return Decision(self.encoder.action_names[a], a, legal,
                        {n: float(p) for n, p in zip(self.encoder.action_names, probs)},
                        float(out["logp"][0]), float(out["entropy"][0]), float(out["value"][0]),
                        policy.version, group if policy.alias == group else CHAMPION,
                        latency_ms=(time.perf_counter() - t0) * 1000.0)

    def _fallback(self, S: torch.Tensor, mask: torch.Tensor, group: str, kind: str, reason: str,
                  t0: float) -> Decision:
        self._count(kind)
        log.warning("policy client: rule-engine fallback (%s): %s", kind, reason)
        a = self.encoder.rule_action(S, mask)
        return Decision(self.encoder.action_names[a], a, mask[0].tolist(), None, None, None, None,
                        RULES_VERSION, group, fallback=True, reason=reason,
                        latency_ms=(time.perf_counter() - t0) * 1000.0)

    def _count(self, kind: str) -> None:
        with self._lock:
            self.fallbacks[kind] += 1

    @property
    def fallback_count(self) -> int:
        """Decisions answered by the rule engine so far (unreadable states included)."""
        return sum(self.fallbacks.values())

    def close(self) -> None:
        import shutil
        self._pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self._cache, ignore_errors=True)

    def __enter__(self) -> "PolicyClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["CHALLENGER", "CHAMPION", "Decision", "LoadedPolicy", "ObservationEncoder", "PolicyClient",
           "StateError", "hash_fraction", "observation_columns"]
