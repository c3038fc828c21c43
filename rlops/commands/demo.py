"""``rlops demo``: the whole loop on one pack, embedded (no servers); see :mod:`rlops.demo`."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="run the whole loop once on a pack, embedded (data in ./rlops-data)")
    p.add_argument(
        "--scenario",
        metavar="NAME",
        default=None,
        help="scenario pack name under scenarios/ (default: params 'scenario')",
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
    return run(args.scenario)
