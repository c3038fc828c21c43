"""Registered versions: the newest of a model (for steps that need "the latest candidate") and the
files a version was registered from."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlops.registry.client import Tracker


def latest_model_version(tracker: Tracker, name: str) -> str | None:
    """The highest version number of registered model ``name`` (None when it has none)."""

    def search(c: Any) -> list[Any]:
        from mlflow.exceptions import MlflowException

        try:
            c.get_registered_model(name)
        except MlflowException:
            return []
        return list(c.search_model_versions(f"name = '{name}'"))

    found = tracker._call(f"list versions of {name!r}", search)
    return str(max(int(mv.version) for mv in found)) if found else None


def download_version_source(tracker: Tracker, source: str, dst: str | os.PathLike[str]) -> Path:
    """The files of a version's ``source`` (:meth:`Tracker.model_version_source
    <rlops.registry.client.Tracker.model_version_source>`) downloaded under ``dst``: a run's artifact
    folder (``runs:/<run_id>/<path>``) through the tracker, any other artifact URI through MLflow."""
    if source.startswith("runs:/"):
        run_id, _, path = source[len("runs:/") :].partition("/")
        return tracker.download_artifacts(run_id, path, dst)
    import mlflow.artifacts

    return Path(mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(dst)))
