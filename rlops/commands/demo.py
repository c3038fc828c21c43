"""``rlops demo``: the whole loop on one pack, embedded (no servers); see :mod:`rlops.demo`."""

from __future__ import annotations

import argparse
from typing import NoReturn


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="run the whole loop once on a pack, embedded (data in ./rlops-data)")
    p.add_argument(
        "--scenario",
        metavar="NAME_OR_PATH",
        default=None,
        help="scenario pack: a name under scenarios/ or a pack folder (default: params 'scenario')",
    )
    p.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    import logging
    import os
    import warnings

    from rlops.demo import run

    warnings.filterwarnings("ignore")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    _exit_now(run(args.scenario))


def _exit_now(rc: int) -> NoReturn:
    """End the process once the demo is done. Everything it wrote is closed and committed by
    then (trace files, reports, the SQLite MLflow store); what is left is the interpreter freeing
    torch, MLflow and Great Expectations object by object and their exit hooks (torch's dynamo
    formats a table of compile times it then does not print): 4-5 s of a ~45 s demo, measured."""
    import logging
    import os
    import sys

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
