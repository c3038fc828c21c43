"""``rlops stack up|status|down``: the whole loop on one machine — a real Airflow, an MLflow server
with webhooks, the webhook receiver and the console (see :mod:`rlops.stack`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rlops.commands.common_args import print_json

if TYPE_CHECKING:
    from rlops.common.params_model import Params
    from rlops.stack.control import StackStatus


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("stack", help="start, inspect or stop the one-machine deployment (Airflow, MLflow, receiver)")
    verbs = p.add_subparsers(dest="stack_command", required=True, metavar="ACTION")
    for name, help_text, func in (
        ("up", "start what is not running yet; print where to look", cmd_up),
        ("status", "each part, its URL and state; pools and DAGs that keep runs from starting", cmd_status),
        ("down", "stop the processes this stack started", cmd_down),
    ):
        v = verbs.add_parser(name, help=help_text)
        v.add_argument("--home", default=None, help="the stack's folder (default: params stack.home)")
        v.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
        v.set_defaults(func=func)


def _params() -> Params:
    from rlops.common.config import resolve_params

    return resolve_params().model


def _print(status: StackStatus, as_json: bool) -> None:
    if as_json:
        print_json(status.as_dict())
        return
    width = max(len(p.name) for p in status.parts)
    for p in status.parts:
        where = p.url or ""
        print(f"  {p.name:<{width}}  {p.state:<8} {where}")
    print(f"  Airflow login: {status.user}, password in {status.credentials_file}")
    print(f"  home {status.home}  AIRFLOW_HOME {status.airflow_home}")
    print(f"  airflow CLI: {status.airflow_cli}")
    print(f"  database {status.database}")
    for problem in status.problems:
        print(f"  problem: {problem}")


def cmd_up(args: argparse.Namespace) -> int:
    from rlops.stack.control import up

    status = up(_params(), args.home)
    if not args.json:
        started = ", ".join(status.started) or "nothing"
        print(f"rlops stack up in {status.seconds} s: started {started}; reused {len(status.reused)} running part(s)")
        if status.unpaused:
            print(f"  unpaused {len(status.unpaused)} DAG(s): {', '.join(status.unpaused)}")
    _print(status, args.json)
    return 0 if status.up and not status.problems else 1


def cmd_status(args: argparse.Namespace) -> int:
    from rlops.stack.control import status

    st = status(_params(), args.home)
    _print(st, args.json)
    return 0 if st.up and not st.problems else 1


def cmd_down(args: argparse.Namespace) -> int:
    from rlops.stack.control import down

    stopped = down(_params(), args.home)
    if args.json:
        print_json({"stopped": stopped})
    else:
        print(f"stopped {', '.join(stopped)}" if stopped else "nothing of this stack was running")
    return 0
