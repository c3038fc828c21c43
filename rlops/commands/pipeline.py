"""Pipeline step commands: each step module registers its own subcommand(s)."""

from __future__ import annotations

import argparse
import importlib

# (module, function) pairs; each function takes the subparsers object and adds its commands.
_STEP_CLIS: list[tuple[str, str]] = [
    ("pipeline_steps.capture.step", "add_cli"),        # trace-capture
    ("pipeline_steps.drift.report", "add_cli"),        # drift-detect
    ("pipeline_steps.drift.check", "add_cli"),         # drift-check
    ("pipeline_steps.drift.calibrate", "add_cli"),         # recalibrate
    ("pipeline_steps.labels.step", "add_cli"),         # label-queue run|export|import
    ("pipeline_steps.training.reward_model", "add_cli"),   # train-reward-model
    ("pipeline_steps.training.policy", "add_cli"),               # train, train-status
    ("pipeline_steps.training.relabel", "add_cli"),              # relabel
    ("pipeline_steps.training.hot_reload", "add_cli"),           # train-switch-reward
    ("pipeline_steps.stress.step", "add_cli"),         # stress-test
    ("pipeline_steps.promotion.evaluate", "add_cli"),            # evaluate, promote, rollback
    ("pipeline_steps.audit.replay", "add_cli"),               # replay, audit
]


def register(sub: argparse._SubParsersAction) -> None:
    for module, func in _STEP_CLIS:
        getattr(importlib.import_module(module), func)(sub)
