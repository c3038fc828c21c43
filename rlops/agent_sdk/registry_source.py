"""Reading a scenario's policies from the MLflow registry, for the policy client.

:meth:`RegistrySource.resolve` turns an alias or a version into the registered version and its
tags (one registry call); :meth:`RegistrySource.load` downloads and loads a version once and keeps
the last few loaded versions in memory, so a rollback to a version served minutes ago swaps in
without a download.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlops.agent_sdk.numpy_policy import NumpyPolicy
from rlops.agent_sdk.serving import (
    CHALLENGER,
    CHALLENGER_RECORD_TAG,
    CHAMPION,
    SEGMENT_TAG,
    SHADOW,
    TRAFFIC_TAG,
    LoadedPolicy,
    ServingState,
)
from rlops.common.policy_ref import PolicyRef, canonical_policy

log = logging.getLogger(__name__)

#: Loaded versions kept in memory besides those being served.
KEEP_LOADED = 4


class RegistrySource:
    """One registered model's versions, resolved and loaded."""

    def __init__(
        self,
        tracking_uri: str,
        scenario: str,
        model_name: str,
        obs_columns: list[str],
        http_max_retries: int = 2,
        http_timeout_s: int = 10,
        runtime: str = "torch",
    ):
        self.tracking_uri, self.scenario, self.model_name = tracking_uri, scenario, model_name
        self.obs_columns = obs_columns
        self.runtime = runtime
        """``torch``: the pyfunc model as registered; ``numpy``: its network's numpy export."""
        self._http_env = {
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(int(http_max_retries)),
            "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(http_timeout_s)),
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        }
        self._models: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._cache = Path(tempfile.mkdtemp(prefix="rlops-policy-"))

    def canonical(self, version: str) -> str:
        return canonical_policy(version, self.scenario)

    def resolve(self, ref: PolicyRef) -> tuple[str, dict[str, str]] | None:
        """``(version, tags)`` of an alias or version; None when the alias or version does not exist."""
        from mlflow.exceptions import MlflowException

        client = self._client()
        try:
            with self._http_limits():
                if ref.version is not None:
                    mv = client.get_model_version(self.model_name, ref.version)
                else:
                    mv = client.get_model_version_by_alias(self.model_name, str(ref.alias))
        except MlflowException as exc:
            if str(getattr(exc, "error_code", "")) in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None
            raise
        return str(mv.version), dict(mv.tags)

    def model_tags(self) -> dict[str, str]:
        """The registered model's own tags (empty when it does not exist)."""
        from mlflow.exceptions import MlflowException

        try:
            with self._http_limits():
                return dict(self._client().get_registered_model(self.model_name).tags)
        except MlflowException as exc:
            if str(getattr(exc, "error_code", "")) == "RESOURCE_DOES_NOT_EXIST":
                return {}
            raise

    def load(self, version: str) -> Any:
        """The loaded model of ``version`` (downloaded on first use)."""
        with self._lock:
            if version in self._models:
                self._models.move_to_end(version)
                return self._models[version]
        client = self._client()
        with self._http_limits():
            mv = client.get_model_version(self.model_name, version)
            source = str(mv.source)
            if not source.startswith("runs:/"):
                raise ValueError(f"{self.model_name} v{version}: unsupported model source {source!r}")
            run_id, _, path = source[len("runs:/") :].partition("/")
            dst = self._cache / f"v{version}"
            shutil.rmtree(dst, ignore_errors=True)
            local = client.download_artifacts(run_id, path, str(dst))
        if self.runtime == "numpy":
            model: Any = NumpyPolicy.load_pyfunc(local)
        else:
            import mlflow.pyfunc

            model = mlflow.pyfunc.load_model(local).unwrap_python_model()
        if list(model.obs_columns) != self.obs_columns:
            raise ValueError(
                f"{self.model_name} v{version} expects another observation layout than the "
                f"pack {self.scenario} (trained on a different scenario version)"
            )
        with self._lock:
            self._models[version] = model
            while len(self._models) > KEEP_LOADED:
                self._models.popitem(last=False)
        return model

    def _client(self) -> Any:
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)

    @contextlib.contextmanager
    def _http_limits(self) -> Iterator[None]:
        # MLflow's own defaults retry for minutes; a deployment's own settings win.
        added = [k for k in self._http_env if k not in os.environ]
        os.environ.update({k: self._http_env[k] for k in added})
        try:
            yield
        finally:
            for k in added:
                os.environ.pop(k, None)

    def close(self) -> None:
        shutil.rmtree(self._cache, ignore_errors=True)


def build_serving_state(
    source: RegistrySource,
    scenario: str,
    old: ServingState,
    shadow: PolicyRef | None,
    fraction_override: float | None,
    now: float,
) -> ServingState:
    """The complete next serving state: the versions behind ``champion``, ``challenger`` (and the
    shadow), loaded, and the challenger's traffic share (``fraction_override``, else its
    ``traffic_fraction`` tag). A policy that cannot be resolved or loaded keeps the one of ``old``,
    with the error recorded; an alias that does not exist serves nothing, and a shadow version that
    does not exist is a recorded error.

    Only what can decide is loaded: loading a model runs its code, so a challenger with no traffic
    share (and not the shadow) stays resolved but unloaded. Whatever a model's code raises while it
    loads — ``SystemExit`` included — is that version's load error, never the agent's exit (only an
    interrupt goes through).

    The challenger is served a share only when rlops staged it: the registered model's record
    ``rlops.alias.challenger`` names the same version. A ``challenger`` set by hand in the MLflow
    UI is a request for the gates, not a roll-out — its version may still carry the share of an
    earlier roll-out — so it serves no traffic until rlops stages it (or while the record cannot be
    read). The record is not signed for the agent (it has no registry key); a person who forges it
    by hand bypasses the gates knowingly."""
    refs = [(CHAMPION, PolicyRef(scenario, alias=CHAMPION)), (CHALLENGER, PolicyRef(scenario, alias=CHALLENGER))]
    if shadow is not None:
        refs.append((SHADOW, shadow))
    errors: dict[str, str] = {}
    loaded: dict[str, LoadedPolicy | None] = {}
    for group, ref in refs:
        try:
            found = source.resolve(ref)
        except Exception as exc:  # noqa: BLE001 - any failure means "serve what we have"
            _keep_old(source, old, group, exc, errors, loaded)
            continue
        if found is None:
            loaded[group] = None
            if group == SHADOW and ref.version is not None:  # asked for by number: a typo, not a state
                errors[group] = f"version {ref.version} of {source.model_name} does not exist"
                log.warning("policy client: shadow %s", errors[group])
            continue
        version, tags = found
        loaded[group] = LoadedPolicy(
            alias=ref.alias or version, version=version, model=None, tags=tags, ref=source.canonical(version)
        )
    challenger = loaded.get(CHALLENGER)
    fraction = 0.0
    if fraction_override is not None:
        fraction = float(fraction_override)
    elif challenger is not None:
        fraction, problem = traffic_share(challenger.tags.get(TRAFFIC_TAG))
        if problem:
            errors[CHALLENGER] = "; ".join(filter(None, [errors.get(CHALLENGER), f"v{challenger.version}: {problem}"]))
            log.warning("policy client: %s v%s: %s", source.model_name, challenger.version, problem)
    fraction = min(max(fraction, 0.0), 1.0) if math.isfinite(fraction) else 0.0
    if challenger is not None and fraction > 0.0:
        fraction = fraction if _staged_by_rlops(source, challenger.version, old, errors) else 0.0
    for group in (CHAMPION, CHALLENGER, SHADOW):
        policy = loaded.get(group)
        if policy is None or policy.loaded or (group == CHALLENGER and fraction <= 0.0):
            continue
        try:
            loaded[group] = dataclasses.replace(policy, model=source.load(policy.version))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - a model's code may even raise SystemExit
            _keep_old(source, old, group, exc, errors, loaded)
    challenger = loaded.get(CHALLENGER)
    segment = None
    if challenger is not None:  # a segment stage: the share applies to that segment's requests only
        segment = (challenger.tags.get(SEGMENT_TAG) or "").strip() or None
    return ServingState(
        champion=loaded.get(CHAMPION),
        challenger=challenger,
        challenger_fraction=fraction,
        shadow=loaded.get(SHADOW),
        generation=old.generation + 1,
        loaded_at=now,
        load_errors=tuple(sorted(errors.items())),
        challenger_segment=segment,
    )


def _keep_old(
    source: RegistrySource,
    old: ServingState,
    group: str,
    exc: BaseException,
    errors: dict[str, str],
    loaded: dict[str, LoadedPolicy | None],
) -> None:
    """Record why ``group`` could not be resolved or loaded, and keep serving what ``old`` had."""
    errors[group] = "; ".join(filter(None, [errors.get(group), f"{type(exc).__name__}: {exc}"]))
    loaded[group] = getattr(old, group)
    log.warning("policy client: cannot load %s of %s: %s", group, source.model_name, exc)


def traffic_share(raw: str | None) -> tuple[float, str | None]:
    """The share of traffic a ``traffic_fraction`` tag gives (no tag: none), and what is wrong with a
    tag that is no fraction from 0 to 1: text, NaN, or 5 meant as 5 % serve the challenger nothing,
    never a share clamped to all of the traffic."""
    if raw is None:
        return 0.0, None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:  # also false for NaN
        return 0.0, f"{TRAFFIC_TAG} tag {raw[:40]!r} is not a fraction from 0 to 1; serving the challenger no traffic"
    return value, None


def _staged_by_rlops(source: RegistrySource, version: str, old: ServingState, errors: dict[str, str]) -> bool:
    """Whether rlops' challenger record names ``version`` (see :func:`build_serving_state`)."""
    try:
        recorded = source.model_tags().get(CHALLENGER_RECORD_TAG)
    except Exception as exc:  # noqa: BLE001 - unreadable: no share rather than an unchecked one
        errors[CHALLENGER] = f"cannot read rlops' challenger record: {type(exc).__name__}: {exc}"
        log.warning("policy client: %s: %s; serving the challenger no traffic", source.model_name, exc)
        return False
    if recorded == version:
        return True
    if old.challenger is None or old.challenger.version != version or old.challenger_fraction > 0.0:
        log.warning(
            "policy client: %s v%s is challenger but rlops did not stage it (record: %s); serving it no "
            "traffic until its gated promotion stages it",
            source.model_name,
            version,
            f"v{recorded}" if recorded else "none",
        )
    return False
