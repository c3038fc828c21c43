"""The timeline's own settings: budgets scaled down, storage under its root, and the caller's
``params`` overrides merged last, key by key."""

from __future__ import annotations

from pathlib import Path

from rlops.common.config import load_params
from rlops.timeline.world import TimelineConfig, simulation_params


def test_params_overrides_are_merged_last_and_leave_sibling_keys_alone(tmp_path: Path) -> None:
    base = load_params()
    plain = simulation_params(base, tmp_path, TimelineConfig())
    cfg = TimelineConfig(params=(("drift.anomaly_z", 4.0), ("train.num_envs", 128)))
    tuned = simulation_params(base, tmp_path, cfg)
    assert plain["drift"]["anomaly_z"] == base["drift"]["anomaly_z"]
    assert tuned["drift"]["anomaly_z"] == 4.0 and tuned["train"]["num_envs"] == 128
    # the timeline's own scaled-down values and every other key of the block stay as they were
    assert tuned["drift"]["baseline_episodes"] == plain["drift"]["baseline_episodes"]
    assert tuned["drift"]["anomaly_drop"] == plain["drift"]["anomaly_drop"]
    assert tuned["train"]["total_timesteps"] == plain["train"]["total_timesteps"] == cfg.full_timesteps
