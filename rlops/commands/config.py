"""``rlops config show | validate | schema``: the typed params, where each value comes from, and checks.

``show`` prints every resolved value of a scenario's params (project params.yaml, the pack's
params.yaml deep-merged over it, the environment overrides, else the model's default) with its
origin; ``validate`` checks the project's params and every pack's (or one) and names each bad key
with its file, line and the closest valid name (exit 2); ``schema`` writes the JSON Schema of the
params model that editors use to complete and check params.yaml (``--check``: exit 1 when the
committed file is stale).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from rlops.commands.common_args import print_json

SCHEMA_FILE = "params.schema.json"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser("config", help="the typed params: resolved values and their origin, checks, JSON Schema")
    verbs = config.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser("show", help="every resolved params value of a scenario and where it came from")
    _scenario_arg(p)
    p.add_argument(
        "--params",
        default=None,
        metavar="FILE",
        help="project params file (default: $RLOPS_PARAMS, else params.yaml of the project)",
    )
    p.add_argument("--json", action="store_true", help="print the values as JSON on stdout")
    p.set_defaults(func=cmd_show)

    p = verbs.add_parser(
        "validate",
        help="check the project's and the packs' params; a bad key is named with its "
        "file, line and closest valid name (exit 2)",
    )
    _scenario_arg(p, every=True)
    p.add_argument(
        "--params",
        default=None,
        metavar="FILE",
        help="project params file to check (default: $RLOPS_PARAMS, else params.yaml of the project)",
    )
    p.add_argument("--json", action="store_true", help="print the verdict and the problems as JSON on stdout")
    p.set_defaults(func=cmd_validate)

    p = verbs.add_parser("schema", help=f"write the JSON Schema of the params model ({SCHEMA_FILE})")
    p.add_argument(
        "--out",
        default=None,
        metavar="FILE",
        help=f"where to write it (default: {SCHEMA_FILE} of the project; - for stdout)",
    )
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the file differs from the model")
    p.set_defaults(func=cmd_schema)


def _scenario_arg(p: argparse.ArgumentParser, every: bool = False) -> None:
    default = "every pack under scenarios/" if every else "params 'scenario'"
    p.add_argument(
        "--scenario",
        metavar="NAME_OR_PATH",
        default=None,
        help=f"scenario pack: a name under scenarios/ or a pack folder (default: {default})",
    )


def _project(args: argparse.Namespace) -> tuple[dict[str, Any], str | None]:
    """The project params document (environment overrides applied) and the pack name ``--scenario``
    means (a pack folder anywhere sets ``scenarios_dir`` to its parent)."""
    from rlops.common.config import check_pack_identity, load_params, pack_names, scenarios_dir
    from rlops.common.errors import UserError

    params = load_params(args.params)
    scenario = args.scenario
    if scenario and Path(scenario).is_dir():
        folder = Path(scenario).resolve()
        params["scenarios_dir"], scenario = str(folder.parent), folder.name
    elif scenario and not (scenarios_dir(params) / scenario).is_dir():
        root = scenarios_dir(params)
        packs = pack_names(root)
        raise UserError(
            f"--scenario {scenario}: no pack folder {root / scenario}; expected a pack name "
            f"({', '.join(packs) or 'none under ' + str(root)}) or a pack folder"
        )
    if scenario:  # the params of a pack every step refuses are no answer
        check_pack_identity(scenarios_dir(params) / scenario)
    return params, scenario


def _short(origin: str) -> str:
    """An origin with the file path relative to the current folder where it is under it."""
    path, sep, line = origin.rpartition(":") if origin[-1:].isdigit() else (origin, "", "")
    with contextlib.suppress(ValueError):
        path = str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    return f"{path}{sep}{line}"


def cmd_show(args: argparse.Namespace) -> int:
    from rlops.common.config import resolve_params

    params, scenario = _project(args)
    resolved = resolve_params(scenario, params=params, path=args.params)
    rows = [
        (key, value, _short(origin) if origin.startswith("/") else origin) for key, value, origin in resolved.rows()
    ]
    if args.json:
        print_json(
            {
                "scenario": resolved.model.scenario if scenario is None else scenario,
                "values": [{"key": k, "value": v, "origin": o} for k, v, o in rows],
            }
        )
        return 0
    width = max(len(k) for k, _, _ in rows)
    vwidth = min(40, max(len(json.dumps(v)) for _, v, _ in rows))
    for key, value, origin in rows:
        print(f"{key:<{width}}  {json.dumps(value):<{vwidth}}  {origin}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from rlops.common.config import check_pack_identity, pack_names, resolve_params, scenarios_dir
    from rlops.common.errors import UserError
    from rlops.common.params_sources import ParamsError, ParamsProblem

    params, scenario = _project(args)
    root = scenarios_dir(params)
    folders = [] if scenario else pack_names(root)  # the packs the DAG files read
    packs = [scenario] if scenario else folders
    problems: list[ParamsProblem] = []
    if not root.is_dir():  # every command would then fail to find its pack
        problems.append(
            ParamsProblem("scenarios_dir", f"{root} is not a folder; expected the folder of the scenario packs")
        )
    if folders:
        for folder in folders:  # a name no DAG id can hold: the pack gets no DAGs
            reason = _pack_name_problem(folder)
            if reason is not None:
                problems.append(ParamsProblem(f"scenarios_dir/{folder}", reason, file=str(root / folder)))
                continue
            try:  # a pack named other than its folder: its DAGs and steps are refused too
                check_pack_identity(root / folder)
            except UserError as exc:
                problems.append(ParamsProblem(f"scenarios_dir/{folder}", str(exc)))
    targets: list[str | None] = list(packs) or [None]  # no packs: the project's params alone
    for name in targets:
        try:
            resolve_params(name, params=params, path=args.params)
        except ParamsError as exc:
            problems.extend(p for p in exc.problems if p not in problems)
    checked = ["project params"] + [f"pack {p}" for p in packs]
    if args.json:
        print_json({"valid": not problems, "checked": checked, "problems": [p.to_dict() for p in problems]})
    if problems:
        raise ParamsError(problems)
    if not args.json:
        print(f"params valid: {', '.join(checked)}")
    return 0


def _pack_name_problem(folder: str) -> str | None:
    """Why ``folder`` cannot name a pack's DAGs, or None. A name the scenario grammar allows always
    makes valid DAG ids: only one it refuses needs the DAG settings' message, and with it Airflow's
    SDK (two seconds of imports at every ``config validate``)."""
    from rlops.common.scenario_name import scenario_name_problem

    if scenario_name_problem(folder) is None:
        return None
    from rlops.pipeline_steps.orchestration.settings import pack_name_problem

    return pack_name_problem(folder)


def schema_text() -> str:
    """The JSON Schema of :class:`~rlops.common.params_model.Params`, as committed in params.schema.json."""
    from rlops.common.params_model import Params

    schema = Params.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "rlops params.yaml"
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def cmd_schema(args: argparse.Namespace) -> int:
    from rlops.common.config import REPO_ROOT

    text = schema_text()
    if args.out == "-":
        print(text, end="")
        return 0
    out = Path(args.out) if args.out else REPO_ROOT / SCHEMA_FILE
    if args.check:
        current = out.read_text() if out.exists() else ""
        if current != text:
            print(f"{out} is stale: regenerate it with `rlops config schema`")
            return 1
        print(f"{out} matches the params model")
        return 0
    out.write_text(text)
    print(f"wrote {out}")
    return 0
