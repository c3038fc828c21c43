"""Pipeline step commands: each step module registers its own subcommand(s)."""

from __future__ import annotations

import argparse
import importlib

# (module, function) pairs; each function takes the subparsers object and adds its commands.
_STEP_CLIS: list[tuple[str, str]] = [
    ("pipeline_steps.capture_step", "add_cli"),        # trace-capture
    ("pipeline_steps.drift_report", "add_cli"),        # drift-detect
    ("pipeline_steps.drift_check", "add_cli"),         # drift-check
    ("pipeline_steps.recalibrate", "add_cli"),         # recalibrate
    ("pipeline_steps.label_queue", "add_cli"),         # label-queue run|export|import
    ("pipeline_steps.reward_model_step", "add_cli"),   # train-reward-model
    ("pipeline_steps.train", "add_cli"),               # train, train-status
    ("pipeline_steps.stress_test", "add_cli"),         # stress-test
    ("pipeline_steps.evaluate", "add_cli"),            # evaluate, promote, rollback
    ("pipeline_steps.audit", "add_cli"),               # replay, audit
]


def register(sub: argparse._SubParsersAction) -> None:
    for module, func in _STEP_CLIS:
        getattr(importlib.import_module(module), func)(sub)
