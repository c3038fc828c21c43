"""The newest registered version of a model — for steps that need "the latest candidate"."""

from __future__ import annotations

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
