"""MLflow access for rlops, in one place: experiments, runs, registered models and aliases.

* One experiment per scenario, named after it, created on demand with the configured artifact
  root (``tracking.artifact_root`` / ``RLOPS_ARTIFACT_ROOT``).
* Registered models ``<scenario>-policy``, ``<scenario>-reward-model`` and
  ``<scenario>-reward-fn``; versions are created from a run's artifact folder
  (``runs:/<run_id>/<path>``), which the SQLite backend and an MLflow server both support and
  which needs no MLflow model flavour.
* Aliases ``champion``, ``challenger``, ``previous`` (MLflow 3 has no stages). Promotion moves
  ``champion`` and keeps the old one as ``previous``; if MLflow fails half-way the prior aliases
  are put back, so the registry never shows a half-moved champion.

The tracking URI comes from params (``tracking.uri``, ``MLFLOW_TRACKING_URI``); nothing is set
at import time and MLflow itself is imported only when a :class:`Tracker` is first used.
Every MLflow failure surfaces as a :class:`TrackingError` naming the operation and the server.
The MLflow client calls that read an absent model as empty or survive a concurrent creation are
in :mod:`rlops.registry.mlflow_calls`.

Training loops log through anything with ``log_metrics(metrics, step)`` and
``log_params(params)`` (:class:`MetricsTracker`): a :class:`RunHandle`, a :class:`NullTracker`
or a :class:`ListTracker`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rlops.common.config import resolve_local
from rlops.common.metrics_sink import ListSink, MetricsSink, NullSink
from rlops.common.params_model import Params, TrackingParams
from rlops.common.params_sources import params_block
from rlops.common.policy_ref import policy_model_name as policy_model_name  # re-exported: the registry names models
from rlops.common.redact import redact
from rlops.registry import mlflow_calls
from rlops.registry import tags as K
from rlops.registry.alias_records import record_tags, verified_version
from rlops.registry.run_handle import RunHandle

if TYPE_CHECKING:
    from mlflow import MlflowClient

T = TypeVar("T")


CHAMPION, CHALLENGER, PREVIOUS = "champion", "challenger", "previous"


# MLflow 3.17's UI opens an experiment on the view of a per-browser "GenAI | Model training" switch
# (GenAI by default) and reads ``mlflow.experimentKind`` only where that switch is absent; a link
# that names the view opens rlops' runs and models in the training view in either UI.
UI_TRAINING_VIEW = "workflowType=machine_learning"


def ui_url(base: str, route: str) -> str:
    """A link into the MLflow UI at ``base`` (``experiments/3/runs/<id>``, ``models/<name>``) that
    opens in the model-training view."""
    return f"{base.rstrip('/')}/#/{route.lstrip('/')}?{UI_TRAINING_VIEW}"


class TrackingError(RuntimeError):
    """An MLflow operation that failed (server unreachable, bad request, missing model…)."""


def reward_model_name(scenario: str) -> str:
    return f"{scenario}-reward-model"


def reward_fn_model_name(scenario: str) -> str:
    return f"{scenario}-reward-fn"


# --------------------------------------------------------------------------- metric sinks
# One protocol for everything a training loop reports to; the names below are this module's API.
MetricsTracker = MetricsSink
NullTracker = NullSink
ListTracker = ListSink


# --------------------------------------------------------------------------- tracker
class Tracker:
    """MLflow client for one scenario. Build it with :meth:`from_params`."""

    def __init__(
        self,
        tracking_uri: str,
        scenario: str,
        artifact_root: str | None = None,
        http_max_retries: int = 2,
        http_timeout_s: int = 10,
    ) -> None:
        self.tracking_uri = resolve_local(tracking_uri)
        self.scenario = scenario
        self.artifact_root = mlflow_calls.artifact_location(artifact_root, self.tracking_uri)
        self.http_max_retries = int(http_max_retries)
        self.http_timeout_s = int(http_timeout_s)
        self._client: MlflowClient | None = None
        self._experiments: dict[str, str] = {}
        self.requested_by = K.REQUESTED_BY_RLOPS  # who the alias moves are made for (see on_behalf_of)

    @classmethod
    def from_params(cls, params: Params | TrackingParams | Mapping[str, Any], scenario: str | None = None) -> Tracker:
        """Build from the typed ``tracking`` block (or the params document holding it; env overrides
        already applied) for ``scenario`` (default: the document's ``scenario``)."""
        cfg: TrackingParams = params_block(params, "tracking")
        if scenario is None:
            scenario = (
                params.scenario
                if isinstance(params, Params)
                else str((params.get("scenario") if isinstance(params, Mapping) else None) or Params().scenario)
            )
        return cls(
            tracking_uri=cfg.uri,
            scenario=scenario,
            artifact_root=cfg.artifact_root or None,
            http_max_retries=cfg.http_max_retries,
            http_timeout_s=cfg.http_timeout_s,
        )

    def __repr__(self) -> str:
        return f"Tracker(uri={self.tracking_uri!r}, scenario={self.scenario!r})"

    # ------------------------------------------------------------------ plumbing
    @property
    def client(self) -> MlflowClient:
        if self._client is None:
            from mlflow import MlflowClient

            if self.tracking_uri.startswith("sqlite:///"):  # SQLite cannot create the folder
                Path(self.tracking_uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
            self._client = MlflowClient(tracking_uri=self.tracking_uri, registry_uri=self.tracking_uri)
        return self._client

    @contextmanager
    def http_limits(self) -> Iterator[None]:
        """MLflow retries HTTP calls for minutes by default; bound that for this client,
        unless the deployment set the variables itself."""
        names = {
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(self.http_max_retries),
            "MLFLOW_HTTP_REQUEST_TIMEOUT": str(self.http_timeout_s),
            "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        }
        added = [k for k in names if k not in os.environ]
        os.environ.update({k: names[k] for k in added})
        try:
            yield
        finally:
            for k in added:
                os.environ.pop(k, None)

    def _call(self, op: str, fn: Callable[[MlflowClient], T]) -> T:
        from mlflow.exceptions import MlflowException

        try:
            with self.http_limits():
                return fn(self.client)
        except TrackingError:
            raise
        except (MlflowException, OSError) as exc:
            raise TrackingError(
                redact(
                    f"MLflow {op} failed against {self.tracking_uri}: {_short(exc)}. Check that "
                    "the tracking server is reachable (tracking.uri / MLFLOW_TRACKING_URI) and that "
                    "the experiment, model and version names exist."
                )
            ) from exc

    # ------------------------------------------------------------------ experiments and runs
    def experiment_id_for(self, scenario: str) -> str:
        """Id of the experiment named ``scenario``, created on first use."""
        if scenario not in self._experiments:
            self._experiments[scenario] = self._call(
                f"get/create experiment {scenario!r}",
                lambda c: mlflow_calls.get_or_create_experiment(c, scenario, self.artifact_root),
            )
        return self._experiments[scenario]

    @property
    def experiment_id(self) -> str:
        return self.experiment_id_for(self.scenario)

    @contextmanager
    def start_run(
        self,
        run_name: str,
        tags: Mapping[str, Any] | None = None,
        scenario: str | None = None,
        parent_run_id: str | None = None,
    ) -> Iterator[RunHandle]:
        """A run in the scenario's experiment: FINISHED on normal exit, FAILED on an exception,
        KILLED when the process was interrupted or terminated (:mod:`rlops.common.signals`)."""
        exp_id = self.experiment_id_for(scenario or self.scenario)
        all_tags = {k: str(v) for k, v in (tags or {}).items()}
        if parent_run_id:
            all_tags["mlflow.parentRunId"] = parent_run_id
        run = self._call(f"create run {run_name!r}", lambda c: c.create_run(exp_id, run_name=run_name, tags=all_tags))
        handle = RunHandle(self, run.info.run_id, run.info.artifact_uri)
        try:
            yield handle
        except BaseException as exc:
            status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
            try:
                self._call("end run", lambda c: c.set_terminated(handle.run_id, status=status))
            except TrackingError:
                pass  # the original error is the one worth reporting
            raise
        self._call("end run", lambda c: c.set_terminated(handle.run_id, status="FINISHED"))

    def close_stale_runs(
        self, tags: Mapping[str, Any], status: str = "KILLED", scenario: str | None = None
    ) -> list[str]:
        """End every run still ``RUNNING`` whose tags match ``tags``, as ``status``, and return
        their ids: a killed process never ends its run, so the next attempt of the same work
        closes it (``rlops.closed_by`` says so) instead of leaving it running forever."""
        if status not in ("KILLED", "FAILED"):
            raise ValueError(f"close_stale_runs: status {status!r}, expected KILLED or FAILED")
        exp_id = self.experiment_id_for(scenario or self.scenario)
        where = " and ".join(
            [
                *(f"tags.`{k}` = '{mlflow_calls.quoted(str(v))}'" for k, v in tags.items()),
                "attributes.status = 'RUNNING'",
            ]
        )
        runs = self._call("search stale runs", lambda c: list(c.search_runs([exp_id], filter_string=where)))
        for r in runs:

            def close(c: MlflowClient, run_id: str = r.info.run_id) -> None:
                c.set_tag(
                    run_id, K.CLOSED_BY, "a later attempt of the same work (the process ended without closing the run)"
                )
                c.set_terminated(run_id, status=status)

            self._call("close stale run", close)
        return [r.info.run_id for r in runs]

    def download_artifacts(self, run_id: str, path: str, dst_dir: str | os.PathLike[str]) -> Path:
        Path(dst_dir).mkdir(parents=True, exist_ok=True)
        return Path(
            self._call(f"download {path!r} of run {run_id}", lambda c: c.download_artifacts(run_id, path, str(dst_dir)))
        )

    # ------------------------------------------------------------------ registry
    def register_model(
        self,
        run_id: str,
        artifact_path: str,
        name: str,
        tags: Mapping[str, Any] | None = None,
        description: str | None = None,
    ) -> str:
        """Register the run's artifact folder ``artifact_path`` as a new version of ``name``
        (the registered model is created if needed); returns the version number as a string."""
        str_tags = {k: str(v) for k, v in (tags or {}).items()}
        return self._call(
            f"register {name!r} from run {run_id}",
            lambda c: mlflow_calls.create_version(c, name, run_id, artifact_path, str_tags, description),
        )

    def model_version_tags(self, name: str, version: str) -> dict[str, str]:
        mv = self._call(f"get {name!r} v{version}", lambda c: c.get_model_version(name, str(version)))
        return dict(mv.tags)

    def set_model_version_tags(self, name: str, version: str, tags: Mapping[str, Any]) -> None:
        def tag(c: MlflowClient) -> None:
            for k, v in tags.items():
                c.set_model_version_tag(name, str(version), k, str(v))

        self._call(f"tag {name!r} v{version}", tag)

    def model_version_source(self, name: str, version: str) -> str:
        """The artifact URI a version was registered from (``runs:/<run_id>/<path>``)."""
        return str(self._call(f"get {name!r} v{version}", lambda c: c.get_model_version(name, str(version))).source)

    def find_version_by_tag(self, name: str, key: str, value: str) -> str | None:
        """Lowest version of ``name`` whose tag ``key`` equals ``value``, or None."""
        found = self._call(f"search {name!r} by tag {key}", lambda c: mlflow_calls.versions_tagged(c, name, key, value))
        return str(min(int(mv.version) for mv in found)) if found else None

    # ------------------------------------------------------------------ aliases
    def get_alias(self, name: str, alias: str) -> str | None:
        """Version that ``alias`` points to, or None when the alias or the model is absent."""
        return self._call(f"get alias {alias!r} of {name!r}", lambda c: mlflow_calls.alias_version(c, name, alias))

    def set_alias(self, name: str, alias: str, version: str) -> None:
        """Point ``alias`` at ``version``. rlops' signed record of the move (registered-model tags
        ``rlops.alias.<alias>`` and ``.sig``, :mod:`~rlops.registry.alias_records`) is
        written first, so a webhook or check that sees the alias can tell rlops' own move from one
        made around rlops (by hand in the MLflow UI), whatever tags the UI wrote. Refused, with
        nothing written, by a process whose registry key is not the deployment's."""

        def move(c: MlflowClient) -> None:
            for k, v in record_tags(name, alias, str(version), c.get_registered_model(name).tags).items():
                c.set_registered_model_tag(name, k, v)
            c.set_registered_model_alias(name, alias, str(version))

        self._call(f"set alias {alias!r} of {name!r} to v{version}", move)
        if alias == CHALLENGER:  # a staged roll-out stage: the version's fate changed
            share = self.model_version_tags(name, version).get(K.VERSION.TRAFFIC_FRACTION)
            self.record_outcome(
                name,
                str(version),
                K.OUTCOME_CHALLENGER,
                f"challenger in a staged roll-out (traffic_fraction {share or 'unset'})",
            )

    def delete_alias(self, name: str, alias: str) -> None:

        def delete(c: MlflowClient) -> None:
            record = record_tags(name, alias, None, c.get_registered_model(name).tags)  # refused before the delete
            c.delete_registered_model_alias(name, alias)
            for k, v in record.items():
                c.set_registered_model_tag(name, k, v)

        self._call(f"delete alias {alias!r} of {name!r}", delete)

    def alias_written_by_rlops(self, name: str, alias: str) -> str | None:
        """The version rlops itself last pointed ``alias`` at (None: rlops never set it, deleted
        it, or the record does not carry rlops' signature)."""
        return verified_version(self.model_tags(name), name, alias)

    @contextmanager
    def on_behalf_of(self, requested_by: str) -> Iterator[None]:
        """Alias moves inside the block record ``requested_by`` (e.g. a promotion requested in the UI)."""
        before, self.requested_by = self.requested_by, requested_by
        try:
            yield
        finally:
            self.requested_by = before

    def record_outcome(
        self, name: str, version: str, outcome: str, reason: str, requested_by: str | None = None
    ) -> None:
        """Rewrite all promotion-outcome tags of a version whose fate changed (the outcome tag last,
        so whoever waits for it finds the others written); a champion also sheds ``rolled_back``."""
        if outcome not in K.OUTCOMES:
            raise ValueError(f"promotion outcome {outcome!r}: expected one of {', '.join(K.OUTCOMES)}")

        at = datetime.now(UTC).isoformat(timespec="seconds")
        self.set_model_version_tags(
            name,
            version,
            {
                K.PROMOTION_REASON: reason[:5000],
                K.PROMOTION_REQUESTED_BY: requested_by or self.requested_by,
                K.PROMOTION_AT: at,
                K.PROMOTION_OUTCOME: outcome,
            },
        )
        if outcome == K.OUTCOME_CHAMPION and self.model_version_tags(name, version).get(K.ROLLED_BACK):
            self._call(
                f"untag {name!r} v{version}", lambda c: c.delete_model_version_tag(name, str(version), K.ROLLED_BACK)
            )

    def model_tags(self, name: str) -> dict[str, str]:
        """Tags of the registered model ``name`` (empty when it does not exist)."""
        return self._call(f"get tags of {name!r}", lambda c: mlflow_calls.model_tags(c, name))

    def describe(self, name: str, version: str | None, text: str) -> None:
        """Set the description a user reads in the UI: of version ``version``, or of the
        registered model itself when ``version`` is None."""
        if version is None:
            self._call(f"describe {name!r}", lambda c: c.update_registered_model(name, description=text))
        else:
            self._call(
                f"describe {name!r} v{version}", lambda c: c.update_model_version(name, str(version), description=text)
            )

    def version_description(self, name: str, version: str) -> str:
        mv = self._call(f"get {name!r} v{version}", lambda c: c.get_model_version(name, str(version)))
        return str(mv.description or "")

    def aliases(self, name: str) -> dict[str, str]:
        """All aliases of ``name`` (alias → version); empty when the model does not exist."""
        return self._call(f"get aliases of {name!r}", lambda c: mlflow_calls.model_aliases(c, name))

    # ------------------------------------------------------------------ reward functions
    def register_reward_fn(
        self,
        scenario: str,
        source_path: str | os.PathLike[str],
        sha256: str,
        rule_refs: list[str],
        version_label: str,
        parent_run_id: str | None = None,
    ) -> str:
        """Register a reward module as a version of ``<scenario>-reward-fn`` (tags: sha256,
        rule_refs, version_label); an existing version with the same sha256 is returned
        instead of a duplicate. ``parent_run_id``: the pass the registration happens in."""
        name = reward_fn_model_name(scenario)
        existing = self.find_version_by_tag(name, "sha256", sha256)
        if existing is not None:
            return existing
        src = Path(source_path)
        if not src.is_file():
            raise TrackingError(
                f"reward function source {src} does not exist; expected the "
                f"reward_{version_label}.py module of scenario {scenario!r}"
            )
        tags = {
            "sha256": sha256,
            "rule_refs": ",".join(rule_refs),
            "version_label": version_label,
            "scenario": scenario,
        }
        with self.start_run(
            f"{K.REWARD_FN} {version_label} · {scenario}",
            tags={K.STEP: K.REWARD_FN, K.SCENARIO: scenario, **tags},
            scenario=scenario,
            parent_run_id=parent_run_id,
        ) as run:
            run.log_artifact(src, artifact_path="reward_fn")
            return self.register_model(run.run_id, "reward_fn", name, tags=tags)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) < 600 else text[:600] + "…"
