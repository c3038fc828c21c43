"""Shared settings of the rlops DAGs: default args, typed params, tags. Light on purpose — DAG
files import it at parse time, so it imports nothing heavy."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum

from airflow.sdk import Param

START_DATE = pendulum.datetime(2026, 1, 1, tz="UTC")
GPU_QUEUE = "gpu"
GPU_POOL = "gpu"
SCENARIOS_DIR = Path(__file__).resolve().parent.parent / "scenarios"

DEFAULT_ARGS: dict[str, Any] = {
    "owner": "ml-ops",
    "retries": 2,
    "retry_delay": timedelta(seconds=30),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
}


def scenario_names() -> list[str]:
    """Packs under scenarios/ (a folder with a scenario.yaml)."""
    return sorted(p.name for p in SCENARIOS_DIR.iterdir() if (p / "scenario.yaml").exists()) \
        if SCENARIOS_DIR.is_dir() else ["credit_approval"]


def dag_params(timesteps: int = 200_000, mode: str = "full") -> dict[str, Param]:
    """The conf every rlops DAG accepts, validated by Airflow before a run is created."""
    names = scenario_names()
    return {
        "scenario": Param(names[0] if names else "credit_approval", type="string", enum=names,
                          description="scenario pack under scenarios/"),
        "reward_fn": Param("v1", type="string", pattern=r"^v\d+$",
                                   description="reward function of the pack (reward_<version>.py)"),
        "timesteps": Param(timesteps, type="integer", minimum=1_000, maximum=1_000_000_000,
                           description="PPO environment steps for training tasks"),
        "mode": Param(mode, type="string", enum=["full", "incremental"],
                      description="train from scratch or warm-start from the champion"),
        "dry_run": Param(False, type="boolean", description="report what would change, write nothing"),
        "reward_source": Param(None, type=["null", "string"], enum=[None, "scripted", "model", "blend"],
                               description="policy training reward: scripted, model, blend (null: params "
                                           "train.reward_source)"),
        "reward_blend_lambda": Param(None, type=["null", "number"], minimum=0,
                                     description="weight of the reward model in 'blend' (null: params "
                                                 "train.reward_blend_lambda)"),
        "reward_switch_to": Param(None, type=["null", "string"],
                                  description="hot reload: switch training to this reward function (v<N>) at "
                                              "reward_switch_at_iteration (null: no switch)"),
        "reward_switch_at_iteration": Param(None, type=["null", "integer"], minimum=1,
                                            description="PPO iteration of the switch (null: the first)"),
    }


def dag_settings(timesteps: int = 200_000, mode: str = "full") -> dict[str, Any]:
    """What every rlops DAG shares: start date, no catch-up, one run at a time, retries with
    backoff and the typed params. Each DAG file adds its id, schedule, tags and doc."""
    return {"start_date": START_DATE, "catchup": False, "max_active_runs": 1, "default_args": DEFAULT_ARGS,
            "params": dag_params(timesteps=timesteps, mode=mode)}
