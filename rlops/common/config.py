"""Configuration loading: ``params.yaml`` plus environment overrides, in one place.

Every step, CLI command and DAG task reads its settings through :func:`load_params`, so a
value is defined once (``params.yaml`` at the repository root, or the file named by
``RLOPS_PARAMS``) and overridden from the environment for deployments:

========================  ==============================================
variable                  overrides
========================  ==============================================
``RLOPS_PARAMS``          path of the params file itself
``RLOPS_HOME``            base folder for relative local paths
``RLOPS_STORAGE_ROOT``    ``storage.root`` (``file://…`` or ``s3://…``)
``RLOPS_S3_ENDPOINT_URL`` ``storage.s3_endpoint_url``
``MLFLOW_TRACKING_URI``   ``tracking.uri``
``RLOPS_ARTIFACT_ROOT``   ``tracking.artifact_root``
``RLOPS_QUEUE_DB``        ``label_queue.db_url``
``RLOPS_SCENARIOS_DIR``   ``scenarios_dir`` (the folder of scenario packs)
========================  ==============================================
"""

from __future__ import annotations

from rlops.common.errors import UserError

import copy
import os
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]

_ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "RLOPS_STORAGE_ROOT": ("storage", "root"),
    "RLOPS_S3_ENDPOINT_URL": ("storage", "s3_endpoint_url"),
    "MLFLOW_TRACKING_URI": ("tracking", "uri"),
    "RLOPS_ARTIFACT_ROOT": ("tracking", "artifact_root"),
    "RLOPS_QUEUE_DB": ("label_queue", "db_url"),
    "RLOPS_SCENARIOS_DIR": ("scenarios_dir",),
}


class ConfigError(UserError):
    """A params file that cannot be read or lacks a required section."""


def params_path() -> Path:
    return Path(os.environ.get("RLOPS_PARAMS", REPO_ROOT / "params.yaml"))


def home() -> Path:
    """Base folder for relative local paths (``RLOPS_HOME``, default: the current directory)."""
    return Path(os.environ.get("RLOPS_HOME", os.getcwd())).resolve()


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Return ``base`` with ``override`` merged in recursively (override wins)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def load_params(path: str | os.PathLike[str] | None = None,
                overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Load the params file, apply environment overrides, then explicit ``overrides``."""
    p = Path(path) if path is not None else params_path()
    try:
        params = yaml.safe_load(p.read_text()) or {}
    except FileNotFoundError as exc:
        raise ConfigError(f"params file {p} not found; set RLOPS_PARAMS or run from the "
                          "repository root") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"params file {p} is not valid YAML: {exc}") from exc
    if not isinstance(params, dict):
        raise ConfigError(f"params file {p}: expected a mapping at the top level")
    for var, keys in _ENV_OVERRIDES.items():
        if os.environ.get(var):
            node = params
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            node[keys[-1]] = os.environ[var]
    if overrides:
        params = deep_merge(params, overrides)
    return params


def scenarios_dir(params: dict[str, Any]) -> Path:
    """The folder of scenario packs: params ``scenarios_dir`` (``RLOPS_SCENARIOS_DIR``), else the
    repository's ``scenarios/``."""
    return Path(str(params.get("scenarios_dir") or REPO_ROOT / "scenarios"))


def resolve_local(path_or_uri: str) -> str:
    """Make a relative local path or ``file://`` URI absolute against :func:`home`.

    ``s3://`` and other URIs with a scheme pass through unchanged; ``sqlite:///relative.db``
    becomes ``sqlite:////abs/relative.db``.
    """
    if path_or_uri.startswith("sqlite:///"):
        rest = path_or_uri[len("sqlite:///"):]
        if rest.startswith("/"):
            return path_or_uri
        return "sqlite:///" + str(home() / rest)
    if path_or_uri.startswith("file://"):
        rest = path_or_uri[len("file://"):]
        return "file://" + str(rest if rest.startswith("/") else home() / rest)
    if "://" in path_or_uri:
        return path_or_uri
    p = Path(path_or_uri)
    return str(p if p.is_absolute() else home() / p)
