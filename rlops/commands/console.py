"""``rlops console``: the read-only web console (see :mod:`rlops.console`)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from rlops.console.cli import add_parser

    add_parser(sub)
