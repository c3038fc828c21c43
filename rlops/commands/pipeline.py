"""Pipeline step commands: each step module registers its own subcommand(s)."""

from __future__ import annotations

import argparse
import importlib

# (module, function) pairs; each function takes the subparsers object and adds its commands.
_STEP_CLIS: list[tuple[str, str]] = [
    ("pipeline_steps.capture_step", "add_cli"),
    ("pipeline_steps.drift_report", "add_cli"),
    ("pipeline_steps.reward_model_step", "add_cli"),
]


def register(sub: argparse._SubParsersAction) -> None:
    for module, func in _STEP_CLIS:
        getattr(importlib.import_module(module), func)(sub)
