"""``rlops demo``: the whole loop on one pack, embedded (no servers), on simulated traffic; ``rlops run``:
the same loop on the traces the agents wrote to the landing zone. See :mod:`rlops.demo`."""

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
    r = sub.add_parser(
        "run",
        help="the loop of the DAGs once, on the traces your agents wrote (capture, drift, calibrate, reward model, "
        "train, stress, gated promotion), embedded, with the demo's machine-sized budgets",
    )
    r.add_argument(
        "--scenario",
        metavar="NAME_OR_PATH",
        default=None,
        help="scenario pack: a name under scenarios/ or a pack folder (default: params 'scenario')",
    )
    window = r.add_mutually_exclusive_group()
    window.add_argument(
        "--hours", type=int, default=None, help="the landing zone's last HOURS whole hours (default: 24)"
    )
    window.add_argument(
        "--run-key", default=None, help="the interval to read, e.g. 20261130T0500 or 20261130T0000-1440m"
    )
    r.set_defaults(func=cmd_run)


def cmd_demo(args: argparse.Namespace) -> int:
    from rlops.demo import run

    _quiet_libraries()
    _exit_now(run(args.scenario))


def cmd_run(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from rlops.common.arguments import count
    from rlops.common.run_key import RunKey

    if args.run_key is not None:
        window = RunKey.parse(args.run_key)
    else:
        hours = count("--hours", 24 if args.hours is None else args.hours, maximum=24 * 90)
        end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        window = RunKey(end - timedelta(hours=hours), end)
    from rlops.demo import run

    _quiet_libraries()
    _exit_now(run(args.scenario, landing=window))


def _quiet_libraries() -> None:
    import logging
    import os
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


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
