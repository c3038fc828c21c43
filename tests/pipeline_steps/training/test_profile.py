"""``rlops profile``: a few seconds of PPO, a sample of its iterations under torch.profiler, report
every labelled phase, the top operators and a Chrome trace that loads as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from rlops.common.config import deep_merge
from rlops.pipeline_steps.infra.context import StepContext


def test_profile_reports_the_phases_and_writes_a_chrome_trace(tmp_path: Path) -> None:
    from rlops.pipeline_steps.training.profile import REGIONS, profile_training, region_lines, timing_line

    torch.set_num_threads(1)
    overrides = {
        "local_dir": str(tmp_path / "local"),
        "train": {"num_envs": 16},
        "ppo": {"num_steps": 8, "device": "cpu", "num_minibatches": 2},
    }
    ctx = StepContext.create("credit_approval", run_key="20260105T1000", overrides=deep_merge(overrides, {}))
    trace = tmp_path / "trace.json"
    report = profile_training(ctx, duration_s=1.0, trace_path=trace, sample_iterations=2)
    assert report.iterations >= 4 and report.global_step == report.iterations * 16 * 8
    assert report.recorded == [3, 4]  # after the first iteration (one-time costs) and a warm-up
    assert set(report.regions) == set(REGIONS)  # every phase was recorded, the reward inside the env step
    # two iterations' worth of calls: 8 env steps each, and the rollout's 8 forwards + 2 minibatches × 4 epochs
    assert report.regions["env_step"]["calls"] == 2 * 8
    assert report.regions["reward"]["cpu_ms"] <= report.regions["env_step"]["cpu_ms"]
    assert all(0 < r["share"] <= 1.0 for r in report.regions.values())
    assert sum(r["share"] for k, r in report.regions.items() if k != "reward") <= 1.0
    assert report.iteration_ms_profiled > 0 and report.recorded_wall_s > 0
    assert "Self CPU" in report.top_operators
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"rlops/env_step", "rlops/backward"} <= {e.get("name") for e in events}
    assert sorted(e["name"] for e in events if e.get("name", "").startswith("ProfilerStep")) == [
        "ProfilerStep#2",
        "ProfilerStep#3",
    ]  # the trace holds the sample only (steps count from 0: iterations 3 and 4)
    assert len(region_lines(report)) == len(REGIONS) + 2
    assert timing_line(report).startswith(f"recorded iterations 3–4 of {report.iterations}:")
