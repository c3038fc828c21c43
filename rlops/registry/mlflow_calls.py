"""The MLflow client calls behind :class:`~rlops.registry.client.Tracker`'s methods that need more
than one call: an absent model or alias read as "nothing" (not as a failure), and a registered
model or experiment another process creates at the same moment taken as found.

Each function takes MLflow's own client and does one operation; the tracker runs it inside its
bounded retries and turns any other failure into a
:class:`~rlops.registry.client.TrackingError` naming the operation and the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlops.common.config import resolve_local
from rlops.registry import tags as K

if TYPE_CHECKING:
    from mlflow import MlflowClient


def artifact_location(root: str | None, tracking_uri: str) -> str | None:
    """Artifact location for new experiments. A local folder only makes sense next to a
    local backend; with an MLflow server the server's own (proxied) store is used instead."""
    if not root:
        return None
    remote = tracking_uri.startswith(("http://", "https://", "databricks"))
    if "://" in root or root.startswith("mlflow-artifacts:"):
        return root
    if remote:
        return None
    return Path(resolve_local(root)).as_uri()


def get_or_create_experiment(c: MlflowClient, name: str, location: str | None) -> str:
    """Id of the experiment ``name``, created (at ``location``) when absent."""
    exp = c.get_experiment_by_name(name)
    if exp is not None:
        if K.EXPERIMENT_KIND not in exp.tags:  # made before rlops set it: open on training runs
            c.set_experiment_tag(exp.experiment_id, K.EXPERIMENT_KIND, K.EXPERIMENT_KIND_TRAINING)
        return str(exp.experiment_id)
    try:
        return str(
            c.create_experiment(name, artifact_location=location, tags={K.EXPERIMENT_KIND: K.EXPERIMENT_KIND_TRAINING})
        )
    except Exception:  # noqa: BLE001 - another process created it concurrently
        exp = c.get_experiment_by_name(name)
        if exp is None:
            raise
        return str(exp.experiment_id)


def create_version(
    c: MlflowClient, name: str, run_id: str, artifact_path: str, tags: Mapping[str, str], description: str | None
) -> str:
    """A new version of ``name`` from the run's artifact folder (the registered model created if
    needed); its version number as a string."""
    from mlflow.exceptions import MlflowException

    try:
        c.get_registered_model(name)
    except MlflowException:
        try:
            c.create_registered_model(name)
        except MlflowException:  # created concurrently by another process
            c.get_registered_model(name)
    mv = c.create_model_version(
        name, source=f"runs:/{run_id}/{artifact_path}", run_id=run_id, tags=dict(tags), description=description
    )
    return str(mv.version)


def versions_tagged(c: MlflowClient, name: str, key: str, value: str) -> list[Any]:
    """The versions of ``name`` whose tag ``key`` equals ``value`` (none when the model is absent)."""
    from mlflow.exceptions import MlflowException

    try:
        c.get_registered_model(name)
    except MlflowException as exc:
        if not_found(exc):
            return []
        raise
    return list(c.search_model_versions(f"name = '{quoted(name)}' and tags.`{key}` = '{quoted(value)}'"))


def alias_version(c: MlflowClient, name: str, alias: str) -> str | None:
    """The version ``alias`` points to (None when the alias or the model is absent)."""
    from mlflow.exceptions import MlflowException

    try:
        return str(c.get_model_version_by_alias(name, alias).version)
    except MlflowException as exc:
        if not_found(exc):
            return None
        raise


def model_tags(c: MlflowClient, name: str) -> dict[str, str]:
    """Tags of the registered model ``name`` (empty when it does not exist)."""
    from mlflow.exceptions import MlflowException

    try:
        return dict(c.get_registered_model(name).tags)
    except MlflowException as exc:
        if not_found(exc):
            return {}
        raise


def model_aliases(c: MlflowClient, name: str) -> dict[str, str]:
    """All aliases of ``name`` (alias → version); empty when the model does not exist."""
    from mlflow.exceptions import MlflowException

    try:
        return {k: str(v) for k, v in c.get_registered_model(name).aliases.items()}
    except MlflowException as exc:
        if not_found(exc):
            return {}
        raise


def not_found(exc: Exception) -> bool:
    """Whether MLflow's error says the model, version or alias asked for does not exist."""
    code = str(getattr(exc, "error_code", ""))
    return code == "RESOURCE_DOES_NOT_EXIST" or (code == "INVALID_PARAMETER_VALUE" and "not found" in str(exc).lower())


def quoted(value: str) -> str:
    """``value`` inside single quotes of MLflow's search grammar."""
    return value.replace("'", "\\'")
