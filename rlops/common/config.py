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

A pack's ``scenarios/<name>/params.yaml`` is deep-merged over the project's, and the merged document
is validated once against :class:`~rlops.common.params_model.Params` (:func:`resolve_params`), the
typed model every step, command and DAG reads its settings from. ``rlops config show`` prints the
resolved values with their origin; ``rlops config validate`` names a bad key with file and line.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from rlops.common.errors import UserError
from rlops.common.params_model import Params
from rlops.common.params_promotion import RolloutStage
from rlops.common.params_sources import (
    ConfigError,
    ParamsError,
    ParamsProblem,
    ParamsSource,
    ResolvedParams,
    _lines_of,
    read_params_file,
    validate_document,
)
from rlops.common.params_sources import _locate as locate
from rlops.common.scenario_name import identity_problem
from rlops.sandbox.errors import ExprError, PackError
from rlops.sandbox.precheck import load_params as load_pack_params
from rlops.sandbox.precheck import present
from rlops.sandbox.segments import compile_segment, read_spec
from rlops.sandbox.yaml_lines import LDict, load_yaml

REPO_ROOT = Path(__file__).resolve().parents[2]

_ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "RLOPS_STORAGE_ROOT": ("storage", "root"),
    "RLOPS_S3_ENDPOINT_URL": ("storage", "s3_endpoint_url"),
    "MLFLOW_TRACKING_URI": ("tracking", "uri"),
    "RLOPS_ARTIFACT_ROOT": ("tracking", "artifact_root"),
    "RLOPS_QUEUE_DB": ("label_queue", "db_url"),
    "RLOPS_SCENARIOS_DIR": ("scenarios_dir",),
}


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


def _env_overrides() -> dict[tuple[str, ...], tuple[str, str]]:
    """``{key path: (variable, value)}`` of the environment overrides that are set."""
    return {keys: (var, os.environ[var]) for var, keys in _ENV_OVERRIDES.items() if os.environ.get(var)}


def _env_sources(params: dict[str, Any]) -> list[ParamsSource]:
    """One params source per environment override that ``params`` holds, labelled with its
    variable: a bad value it set is then named by the variable, not by the params file."""
    out = []
    for keys, (var, value) in _env_overrides().items():
        if _get(params, keys) == value:
            doc: dict[str, Any] = {}
            set_path(doc, keys, value)
            out.append(ParamsSource(f"environment variable {var}", None, {}, doc))
    return out


def set_path(doc: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    """Set ``doc[k0][k1]…[kn] = value``, creating (or replacing non-dict) levels on the way."""
    node = doc
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    node[keys[-1]] = value


def load_params(path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The project params document: the params file, the environment overrides, then explicit
    ``overrides``, checked against the typed model (:class:`~rlops.common.params_model.Params`);
    a bad key or value raises :class:`ParamsError` naming its file and line. The result is the
    document as written (defaults are the model's: read values through :func:`resolve_params`)."""
    source = read_params_file(Path(path) if path is not None else params_path(), "project params.yaml")
    params = copy.deepcopy(source.document)
    for keys, (_, value) in _env_overrides().items():
        set_path(params, keys, value)
    env = _env_sources(params)
    if overrides:
        params = deep_merge(params, overrides)
    validate_document(params, [source, *env, ParamsSource("overrides", None, {}, overrides or {})])
    return params


def resolve_params(
    scenario: str | None = None, params: dict[str, Any] | None = None, path: str | os.PathLike[str] | None = None
) -> ResolvedParams:
    """The typed params of ``scenario``: the project document (``params``, else the params file
    with its environment overrides) deep-merged with the pack's ``params.yaml``, validated once.
    Each value knows where it came from (:meth:`ResolvedParams.rows`)."""
    project_file = Path(path) if path is not None else params_path()
    if params is None:
        project = read_params_file(project_file, "project params.yaml")
        params = project.document
        for keys, (_, value) in _env_overrides().items():
            set_path(params, keys, value)
    else:
        project = ParamsSource(
            "project params.yaml",
            project_file if project_file.exists() else None,
            _lines_of(project_file) if project_file.exists() else {},
            copy.deepcopy(params),
        )
    scenario = scenario or str(params.get("scenario") or Params.model_fields["scenario"].default)
    sources = [project, *_env_sources(params)]
    merged = copy.deepcopy(params)
    pack = pack_params_source(scenarios_dir(params) / scenario, scenario)
    if pack is not None:
        sources.append(pack)
        merged = deep_merge(merged, pack.document)
    model = validate_document(merged, sources)
    check_rollout_segments(model, scenarios_dir(params) / scenario, sources)
    env = {keys: var for keys, (var, value) in _env_overrides().items() if _get(params, keys) == value}
    return ResolvedParams(model, merged, tuple(sources), env)


def pack_params_source(pack_dir: Path, scenario: str) -> ParamsSource | None:
    """The pack's ``params.yaml`` as a params source (None when the pack has none), read by the
    pack loader's own reader (:func:`rlops.sandbox.precheck.load_params`: a link out of the pack
    or a bad document is refused there), so the sandbox and the resolved params see one document."""
    path = pack_dir / "params.yaml"
    if not present(path):  # a dangling link is an error, not "no params"
        return None
    try:
        document = load_pack_params(pack_dir)
    except PackError as exc:
        raise ConfigError(f"pack {scenario} params.yaml: {exc}") from None
    return ParamsSource(f"pack {scenario} params.yaml", path, key_lines(document), copy.deepcopy(document))


def key_lines(doc: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """The 1-based line of every mapping key of a document :func:`rlops.sandbox.yaml_lines.load_yaml`
    read, by key path."""
    out: dict[tuple[str, ...], int] = {}
    if isinstance(doc, LDict):
        for key, value in doc.items():
            path = (*prefix, str(key))
            line = doc.key_lines.get(key)
            if line is not None:
                out[path] = line
            out.update(key_lines(value, path))
    return out


def check_rollout_segments(model: Params, pack_dir: Path, sources: list[ParamsSource]) -> None:
    """The segments the params name — of ``evaluate.rollout_stages`` and ``exploration.off_segment``
    — compiled against the pack's scenario (when the folder holds one): a bad one is a
    :class:`ParamsError` naming the key, its file and line. A blank ``off_segment`` is refused
    anywhere: it would read as no segment, every request exploring."""
    named: list[tuple[str, tuple[str, ...], str]] = [
        (f"evaluate.rollout_stages.{i}.segment", ("evaluate", "rollout_stages"), s.segment)
        for i, s in enumerate(model.evaluate.rollout_stages)
        if isinstance(s, RolloutStage) and s.segment is not None
    ]
    off = model.exploration.off_segment
    if off is not None and not off.strip():
        file, line = locate(("exploration", "off_segment"), sources)
        problem = "blank; expected an expression over state fields (or null: every request may explore)"
        raise ParamsError([ParamsProblem("exploration.off_segment", problem, file, line, None)])
    if off is not None:
        named.append(("exploration.off_segment", ("exploration", "off_segment"), off))
    if not named or not (pack_dir / "scenario.yaml").is_file():
        return

    # numpy (a tenth of a second) only for a pack with segments: every command reads params
    from rlops.sandbox.expr_numpy import NUMPY_OPS

    try:
        spec = read_spec(pack_dir)
    except PackError:
        return  # the pack's own error is reported where the pack is loaded
    for where, keys, segment in named:
        try:
            compile_segment(spec, segment, ops=NUMPY_OPS)
        except ExprError as exc:
            file, line = locate(keys, sources)
            raise ParamsError([ParamsProblem(where, f"{exc} (scenario {spec.name})", file, line, None)]) from None


def _get(doc: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        doc = doc.get(k) if isinstance(doc, dict) else None
    return doc


def scenarios_dir(params: dict[str, Any]) -> Path:
    """The folder of scenario packs: params ``scenarios_dir`` (``RLOPS_SCENARIOS_DIR``), else the
    repository's ``scenarios/``."""
    return Path(str(params.get("scenarios_dir") or REPO_ROOT / "scenarios"))


def check_pack_identity(pack_dir: Path) -> None:
    """The pack in ``pack_dir`` declares its folder's name as its ``name:`` (see
    :func:`rlops.common.scenario_name.identity_problem`), else a :class:`UserError` (exit 2). A
    ``scenario.yaml`` that cannot be read is left to the pack loader, which says what is wrong."""
    file = pack_dir / "scenario.yaml"
    if not file.is_file():
        return
    try:
        doc = load_yaml(file, pack_dir)
    except (PackError, RecursionError):
        return
    problem = identity_problem(pack_dir.name, doc.get("name") if isinstance(doc, dict) else None, str(file))
    if problem is not None:
        raise UserError(problem)


def pack_names(root: Path) -> list[str]:
    """The packs under a scenarios folder: its sub-folders holding a ``scenario.yaml``, sorted."""
    return sorted(p.name for p in root.iterdir() if (p / "scenario.yaml").is_file()) if root.is_dir() else []


def resolve_local(path_or_uri: str) -> str:
    """Make a relative local path or ``file://`` URI absolute against :func:`home`.

    ``s3://`` and other URIs with a scheme pass through unchanged; ``sqlite:///relative.db``
    becomes ``sqlite:////abs/relative.db``.
    """
    if path_or_uri.startswith("sqlite:///"):
        rest = path_or_uri[len("sqlite:///") :]
        if rest.startswith("/"):
            return path_or_uri
        return "sqlite:///" + str(home() / rest)
    if path_or_uri.startswith("file://"):
        rest = path_or_uri[len("file://") :]
        return "file://" + str(rest if rest.startswith("/") else home() / rest)
    if "://" in path_or_uri:
        return path_or_uri
    p = Path(path_or_uri)
    return str(p if p.is_absolute() else home() / p)


__all__ = [
    "REPO_ROOT",
    "ConfigError",
    "ParamsError",
    "Params",
    "ResolvedParams",
    "check_pack_identity",
    "deep_merge",
    "home",
    "load_params",
    "params_path",
    "pack_names",
    "resolve_local",
    "resolve_params",
    "scenarios_dir",
]
