"""``rlops console [--host 127.0.0.1] [--port 8765]``: serve the read-only web console.

Only argparse is imported here; FastAPI, uvicorn and the data stack load when the command runs,
so ``rlops --help`` stays instant. Bound to a loopback address it needs no token; on any other
address it refuses to start without ``--token`` or ``RLOPS_CONSOLE_TOKEN`` (or put it behind a
reverse proxy that authenticates, see docs/console.md). A connection whose request has not arrived
whole within ``--read-timeout`` seconds is closed (:mod:`rlops.common.http_server`).
"""

from __future__ import annotations

import argparse
import ipaddress
import os

TOKEN_ENV = "RLOPS_CONSOLE_TOKEN"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "console",
        help="read-only web console over the registry and the trace store",
        description="Serve the read-only web console over the registry and the trace store.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--token", default=None, help=f"access token, required off loopback (default: ${TOKEN_ENV})")
    p.add_argument(
        "--mlflow-ui",
        default=os.environ.get("RLOPS_MLFLOW_UI", "http://127.0.0.1:5000"),
        help="base URL of the MLflow UI the pages link into ('' for no links)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="close a connection whose request has not arrived whole within this many seconds (default 10)",
    )
    p.set_defaults(func=run)
    return p


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(host: str, token: str | None) -> str | None:
    """The token to require; a UserError (exit 2) when off loopback without one."""
    from rlops.common.errors import UserError

    token = token or os.environ.get(TOKEN_ENV) or None
    if token is None and not is_loopback(host):
        raise UserError(
            f"rlops console binds {host}, which is not a loopback address: pass --token or set "
            f"{TOKEN_ENV} (or bind 127.0.0.1 behind an authenticating reverse proxy)"
        )
    return token


def run(args: argparse.Namespace) -> int:
    from rlops.common.arguments import count

    port = count("--port", args.port, minimum=1, maximum=65_535)  # out of range: exit 2, never a hang
    token = resolve_token(args.host, args.token)
    from rlops.common.http_server import read_timeout, serve
    from rlops.console.app import create_app
    from rlops.console.data import ProjectData

    seconds = read_timeout(args.read_timeout, "--read-timeout")  # before anything loads or binds
    app = create_app(ProjectData(), token=token, mlflow_ui=args.mlflow_ui or None)
    where = f"http://{args.host}:{port}/"
    print(f"rlops console on {where}" + (" (token required: open it once with ?token=…)" if token else ""), flush=True)
    serve(app, args.host, port, "warning", seconds)
    return 0
