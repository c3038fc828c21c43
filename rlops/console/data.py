"""Every read the console makes of the project: the registry (MLflow), the trace store, the pack.

This is the console's only seam into the rest of the code base: the other console modules import
project code through this module alone, so a reorganisation of ``pipeline_steps`` is re-pointed
here. Nothing in this module writes to the registry or the trace store.

Project functions used (and where they live today):

* ``rlops.common.config``: ``load_params``, ``scenarios_dir``
* ``rlops.pipeline_steps.infra.context.StepContext`` (``create``, ``storage`` — ``list``, ``local_path``,
  ``join``, ``exists``, ``read_json`` —, ``traces.reader`` (every trace-store read, DuckDB),
  ``tracker.client`` / ``tracker.tracking_uri``,
  ``load_pack``, ``section``, ``uri``, ``local_dir``)
* ``rlops.trace_store.states``: ``state_features``, ``mask_matrix``,
  ``observations_from_traces``, ``error_flags``, ``STATE_PREFIX``
* ``rlops.pipeline_steps.labels.select``: ``kmeans``
* ``rlops.pipeline_steps.audit.rows``: ``component_records``, ``to_go``
* ``rlops.pipeline_steps.audit.report``: ``describe_cluster``
* ``rlops.pipeline_steps.infra.policy_loader``: ``load_policy_ref``
* ``rlops.registry.client``: ``policy_model_name``, ``reward_model_name``, ``reward_fn_model_name``
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd

from rlops.common.config import load_params, pack_names, scenarios_dir
from rlops.common.redact import redact
from rlops.common.scenario_name import SCENARIO_NAME
from rlops.console.breakdowns import component_scores
from rlops.pipeline_steps.audit.report import describe_cluster
from rlops.pipeline_steps.audit.rows import to_go
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.policy_loader import load_policy_ref
from rlops.pipeline_steps.labels.select import kmeans
from rlops.registry.client import policy_model_name, reward_fn_model_name, reward_model_name
from rlops.sandbox.pack import load_pack
from rlops.trace_store.states import (
    STATE_PREFIX,
    error_flags,
    mask_matrix,
    observations_from_traces,
    state_features,
)

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import Pack
    from rlops.trace_store.query import TraceReader

T = TypeVar("T")
#: After the tracking server failed to answer, registry reads fail at once for this long (a page
#: that reads the registry a dozen times would otherwise wait out each call's timeout).
REGISTRY_RETRY_S = 15.0
_UNREACHABLE_TYPES = ("ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout", "MaxRetryError",
                      "NewConnectionError")  # fmt: skip
_UNREACHABLE_TEXT = ("Max retries exceeded", "Connection refused", "timed out")


class RegistryUnavailable(Exception):
    """The tracking server does not answer: the pages that read the registry say so (HTTP 503)."""


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it chains) says the tracking server could not be reached, as
    opposed to an answer that something does not exist."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (ConnectionError, TimeoutError)) or type(seen).__name__ in _UNREACHABLE_TYPES:
            return True
        if any(t in str(seen) for t in _UNREACHABLE_TEXT):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


SCENARIO_RE = SCENARIO_NAME  # a name in a URL is held to the grammar of every pack name
_EXCLUDED_PARTS = ("/quarantine/",)


@dataclass(frozen=True)
class TraceFile:
    """One parquet file of the trace store, with what makes its content change."""

    uri: str
    size: int
    mtime_ns: int


class TtlCache:
    """A tiny thread-safe cache of values that expire ``ttl`` seconds after they were computed."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._items: dict[Any, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, compute: Callable[[], T]) -> T:
        now = time.monotonic()
        with self._lock:
            hit = self._items.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            out: T = hit[1]
            return out
        value = compute()
        with self._lock:
            self._items[key] = (now, value)
        return value


class ProjectData:
    """Read-only access to one rlops deployment (params → storage, MLflow, scenario packs)."""

    def __init__(self, params: dict[str, Any] | None = None, registry_ttl_s: float = 15.0) -> None:

        self.params = params if params is not None else load_params()
        self._contexts: dict[str, StepContext] = {}
        self._packs: dict[str, Pack] = {}
        self._policies: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self.registry_cache = TtlCache(registry_ttl_s)
        self.listing_cache = TtlCache(3.0)
        self._registry_down: tuple[float, str] | None = None
        """Until when (monotonic) registry reads fail at once, and why."""

    # ------------------------------------------------------------------ scenarios and packs
    def scenarios_dir(self) -> Path:

        return scenarios_dir(self.params)

    def scenarios(self) -> list[str]:
        return pack_names(self.scenarios_dir())

    def context(self, scenario: str) -> StepContext:

        with self._lock:
            if scenario not in self._contexts:
                self._contexts[scenario] = StepContext.create(scenario, params=self.params)
            return self._contexts[scenario]

    def pack(self, scenario: str) -> Pack:
        with self._lock:
            cached = self._packs.get(scenario)
        if cached is None:  # read-only: the pack's liveness check (a sandbox run) is for training, not here
            ctx = self.context(scenario)
            cached = load_pack(ctx.pack_dir, calibration=ctx.read_calibration("latest"), check_liveness=False)
            with self._lock:
                self._packs[scenario] = cached
        return cached

    def cache_dir(self, scenario: str) -> Path:
        return self.context(scenario).local_dir("console-cache", scenario)

    # ------------------------------------------------------------------ trace store
    def trace_files(self, scenario: str) -> list[TraceFile]:
        return self.listing_cache.get(("files", scenario), lambda: self._list_trace_files(scenario))

    def _list_trace_files(self, scenario: str) -> list[TraceFile]:
        ctx = self.context(scenario)
        uri = ctx.traces.scenario_uri(scenario)
        try:
            uris = [u for u in ctx.storage.list(uri, suffix=".parquet") if not any(x in u for x in _EXCLUDED_PARTS)]
        except FileNotFoundError:
            return []
        out = []
        for u in sorted(uris):
            if u.startswith("file://"):
                st = os.stat(u[len("file://") :])
                out.append(TraceFile(u, st.st_size, st.st_mtime_ns))
            else:  # object stores: a rewritten partition keeps its key; the listing is what we know
                out.append(TraceFile(u, 0, 0))
        return out

    def trace_reader(self, scenario: str) -> TraceReader:
        """The trace store's reader (DuckDB over the partitions, settings from ``trace_store``)."""
        return self.context(scenario).traces.reader

    def trace_uri(self, scenario: str) -> str:
        return self.context(scenario).traces.scenario_uri(scenario)

    # ------------------------------------------------------------------ project computations
    def state_features(self, scenario: str, df: pd.DataFrame) -> np.ndarray:

        return state_features(self.pack(scenario), df).numpy()

    def kmeans(self, X: np.ndarray, k: int, seed: int) -> np.ndarray:
        """The centroids ``[k', D]`` of the project's k-means (k-means++ seeding, Lloyd)."""
        import torch

        _, centroids = kmeans(torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32)), k, seed)
        return centroids.numpy()

    def error_flags(self, col: pd.Series) -> np.ndarray:

        return error_flags(col)

    def components(self, df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str | None]]:
        """Per-row component scores and each component's rule ref: the breakdowns in the store's own
        shape parsed together, any other (a trace row from an agent may carry a list, a dict or text
        that is not JSON) shaped row by row (:mod:`rlops.console.breakdowns`)."""
        return component_scores(df.index, df["reward_breakdown"].tolist())

    def state_fields(self, scenario: str) -> list[tuple[str, str, str | None]]:
        """``(path, kind, unit)`` of every observed state field; kind ``number`` or ``category``."""
        return [
            (f.path, "number" if f.type in ("int", "float") else "category", f.unit)
            for f in self.pack(scenario).scenario.spec.fields
            if f.observed
        ]

    def return_to_go(self, df: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:

        return to_go(df, values)

    def describe_cluster(self, scenario: str, rows: pd.DataFrame, everything: pd.DataFrame) -> list[str]:

        return describe_cluster(self.pack(scenario), rows, everything)

    def state_prefix(self) -> str:

        return STATE_PREFIX

    def mask_matrix(self, scenario: str, col: pd.Series) -> np.ndarray:

        return mask_matrix(col, self.pack(scenario).scenario.n_actions)

    def action_names(self, scenario: str) -> list[str]:
        return list(self.pack(scenario).scenario.action_names)

    def action_probabilities(self, scenario: str, version: str, episode: pd.DataFrame) -> np.ndarray | None:
        """Probabilities of every action at each row, recomputed with registry version ``version``
        (None when the rows were not served by a registered version that can be loaded)."""
        import torch

        policy = self._policy(scenario, version)
        if policy is None:
            return None
        obs, masks = observations_from_traces(self.pack(scenario), episode)
        with torch.no_grad():
            logp, _ = policy(obs, masks)
        out: np.ndarray | None = logp.exp().numpy()
        return out

    def _policy(self, scenario: str, version: str) -> Any:
        key = (scenario, version)
        with self._lock:
            if key in self._policies:
                return self._policies[key]

        try:
            dst = Path(tempfile.mkdtemp(prefix="rlops-console-policy-"))
            loaded = load_policy_ref(self.context(scenario), version, dst)
            policy = loaded.network if loaded is not None else None
        except Exception:  # noqa: BLE001 - deleted, unreachable, not a policy: shown as unavailable
            policy = None
        with self._lock:
            self._policies[key] = policy
        return policy

    # ------------------------------------------------------------------ registry (MLflow)
    def model_names(self, scenario: str) -> dict[str, str]:

        return {
            "policy": policy_model_name(scenario),
            "reward_model": reward_model_name(scenario),
            "reward_fn": reward_fn_model_name(scenario),
        }

    def tracking_uri(self, scenario: str) -> str:
        return self.context(scenario).tracker.tracking_uri

    def experiment_id(self, scenario: str) -> str | None:
        def get() -> str | None:
            exp = self._client(scenario).get_experiment_by_name(scenario)
            return None if exp is None else str(exp.experiment_id)

        return self._registry(scenario, ("exp", scenario), get)

    def model_versions(self, scenario: str, kind: str) -> list[dict[str, Any]]:
        """Every version of the scenario's ``kind`` model (policy, reward_model, reward_fn), newest first."""
        name = self.model_names(scenario)[kind]

        def get() -> list[dict[str, Any]]:
            client = self._client(scenario)
            try:
                aliases = dict(client.get_registered_model(name).aliases)
            except Exception as exc:  # noqa: BLE001 - no such model yet
                if unreachable(exc):
                    raise
                return []
            by_version: dict[str, list[str]] = {}
            for alias, v in aliases.items():
                by_version.setdefault(str(v), []).append(alias)
            out = [
                {
                    "name": name,
                    "version": str(mv.version),
                    "run_id": mv.run_id,
                    "tags": dict(mv.tags),
                    "created_ms": int(mv.creation_timestamp or 0),
                    "source": mv.source,
                    "aliases": sorted(by_version.get(str(mv.version), [])),
                }
                for mv in client.search_model_versions(f"name = '{name}'")
            ]
            return sorted(out, key=lambda d: -int(d["version"]))

        return self._registry(scenario, ("versions", scenario, kind), get)

    def runs(self, scenario: str, tag: str, value: str) -> list[dict[str, Any]]:
        """Finished or failed runs of the scenario's experiment whose tag ``tag`` is ``value``, oldest first."""

        def get() -> list[dict[str, Any]]:
            exp = self.experiment_id(scenario)
            if exp is None:
                return []
            found = self._client(scenario).search_runs(
                [exp], f"tags.`{tag}` = '{value}'", max_results=5000, order_by=["attributes.start_time ASC"]
            )
            return [
                {
                    "run_id": r.info.run_id,
                    "name": r.info.run_name,
                    "status": r.info.status,
                    "start_ms": int(r.info.start_time or 0),
                    "tags": dict(r.data.tags),
                    "params": dict(r.data.params),
                    "metrics": dict(r.data.metrics),
                }
                for r in found
            ]

        return self._registry(scenario, ("runs", scenario, tag, value), get)

    def run_artifact_json(self, scenario: str, run_id: str, path: str) -> Any:
        """A JSON artifact of a run (immutable once logged, so cached for good)."""
        import json

        cache = self.cache_dir(scenario) / "artifacts" / run_id / path
        if not cache.is_file():
            try:
                local = self._registry(
                    scenario, None, lambda: self._client(scenario).download_artifacts(run_id, path, tempfile.mkdtemp())
                )
            except RegistryUnavailable:
                raise
            except Exception:  # noqa: BLE001 - artifact absent
                return None
            cache.parent.mkdir(parents=True, exist_ok=True)
            cache.write_text(Path(local).read_text())
        return json.loads(cache.read_text())

    def _client(self, scenario: str) -> Any:
        return self.context(scenario).tracker.client

    def _registry(self, scenario: str, key: Any, get: Callable[[], T]) -> T:
        """``get()`` (cached under ``key`` unless None) with the tracker's bounded retries and timeout;
        when the tracking server does not answer, :class:`RegistryUnavailable` — at once for the next
        :data:`REGISTRY_RETRY_S` seconds, so a page with many reads fails fast instead of hanging."""
        down = self._registry_down
        if down is not None and time.monotonic() < down[0]:
            raise RegistryUnavailable(down[1])
        tracker = self.context(scenario).tracker
        try:
            with tracker.http_limits():
                out = get() if key is None else self.registry_cache.get(key, get)
        except Exception as exc:
            if not unreachable(exc):
                raise
            why = " ".join(str(exc).split())[:200]
            message = redact(
                f"the tracking server {tracker.tracking_uri} does not answer ({why}); pages that read the "
                f"registry say so until it does (asked again after {REGISTRY_RETRY_S:g} s)"
            )
            self._registry_down = (time.monotonic() + REGISTRY_RETRY_S, message)
            raise RegistryUnavailable(message) from None
        self._registry_down = None
        return out

    # ------------------------------------------------------------------ storage documents
    def calibrations(self, scenario: str) -> list[dict[str, Any]]:
        ctx = self.context(scenario)

        def get() -> list[dict[str, Any]]:
            uri = ctx.uri("calibrations", scenario)
            try:
                files = [u for u in ctx.storage.list(uri, suffix=".json") if not u.endswith("/latest.json")]
            except FileNotFoundError:
                return []
            return [ctx.storage.read_json(u) for u in sorted(files)]

        return self.listing_cache.get(("calibrations", scenario), get)

    def evaluation_report(self, scenario: str, run_key: str, candidate: str) -> dict[str, Any] | None:
        """``summary.json`` of an evaluation, from ``reports/evaluate/<scenario>/<run_key>/v<candidate>``."""
        ctx = self.context(scenario)
        uri = ctx.storage.join("reports", "evaluate", scenario, run_key, f"v{candidate}", "summary.json")
        return ctx.storage.read_json(uri) if ctx.storage.exists(uri) else None

    def reward_functions(self, scenario: str) -> list[dict[str, Any]]:
        """The pack's reward functions: label, sha256, source, rule refs with their titles."""
        pack = self.pack(scenario)
        rules = pack.rules or {}
        out = []
        for label in sorted(pack.reward_fns, key=lambda s: (len(s), s)):
            fn = pack.reward_fns[label]
            out.append(
                {
                    "label": label,
                    "sha256": fn.version,
                    "source": fn.source,
                    "path": Path(fn.path).name,
                    "rule_refs": [
                        {
                            "ref": r,
                            "title": str((rules.get(r) or {}).get("title", "")),
                            "text": str((rules.get(r) or {}).get("text", "")),
                        }
                        for r in fn.rule_refs
                    ],
                    "components": [{"name": c.name, "rule_ref": c.rule_ref, "line": c.line} for c in fn.components],
                }
            )
        return out

    def section(self, scenario: str, name: str) -> Any:
        """The typed params block ``name`` of ``scenario`` (project + pack, validated)."""
        return self.context(scenario).section(name)
