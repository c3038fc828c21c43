"""Where the time of a training run goes (``rlops profile``).

PPO runs on the pack for a bounded wall time under ``torch.profiler``. The training loop and the
sandbox mark their phases with ``record_function`` labels (``rlops/env_step`` with
``rlops/reward`` inside it, ``rlops/policy_forward``, ``rlops/advantages``, ``rlops/backward``,
``rlops/optimizer``, ``rlops/data_movement``); the report gives each phase's total time and
share of the profiled wall time, the ten most expensive operators by self time, and a Chrome
trace (open it in ``chrome://tracing`` or https://ui.perfetto.dev).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlops.pipeline_steps.infra.context import StepContext

REGIONS = ("env_step", "reward", "policy_forward", "advantages", "backward", "optimizer", "data_movement")
"""The labelled phases (``rlops.<name>``); ``reward`` runs inside ``env_step``."""


@dataclass
class ProfileReport:
    """Time per phase (ms and share of wall time), the top operators table and the trace file."""

    scenario: str
    device: str
    wall_s: float
    iterations: int
    global_step: int
    regions: dict[str, dict[str, float]] = field(default_factory=dict)
    top_operators: str = ""
    trace: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def profile_training(
    ctx: StepContext,
    duration_s: float,
    device: str | None = None,
    trace_path: Path | None = None,
    reward_fn: str | None = None,
) -> ProfileReport:
    """Train for about ``duration_s`` seconds under the profiler and report where the time went."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from rlops.model.ppo import train
    from rlops.model.ppo_config import resolve_device
    from rlops.pipeline_steps.training.policy import ppo_config
    from rlops.sandbox.profiles import default_profile

    pack = ctx.load_pack()
    label = ctx.reward_choice(reward_fn).reward_fn
    profile_name = default_profile(pack, "sandbox", ctx.config.train.profile)
    # A budget no run reaches in ``duration_s``: the clock, not the step count, ends the run.
    plan = ppo_config(ctx, pack, "full", 10**12, None, device=device, progress=False, plateau_eval_every=0)
    dev = resolve_device(plan.config.device)
    env = pack.make_env(
        plan.num_envs, reward_version=label, profile=profile_name, device=dev.type, seed=plan.config.seed
    )
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        res = train(plan.config, env, on_iteration=lambda it, pol, m: time.perf_counter() - t0 >= duration_s)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    averages = prof.key_averages()
    on_device = dev.type == "cuda"
    regions: dict[str, dict[str, float]] = {}
    for ev in averages:
        if ev.key.startswith("rlops/") and ev.key[6:] in REGIONS:
            cpu_ms = ev.cpu_time_total / 1e3
            row = {"calls": float(ev.count), "cpu_ms": round(cpu_ms, 1), "share": round(cpu_ms / 1e3 / wall, 4)}
            if on_device:
                row["device_ms"] = round(getattr(ev, "device_time_total", 0.0) / 1e3, 1)
            regions[ev.key[6:]] = row
    regions = {k: regions[k] for k in REGIONS if k in regions}
    sort = "self_cuda_time_total" if on_device else "self_cpu_time_total"
    table = averages.table(sort_by=sort, row_limit=10)
    out = trace_path or ctx.local_dir("profiles", ctx.scenario) / f"trace-{time.strftime('%Y%m%dT%H%M%S')}.json"
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out))
    return ProfileReport(
        ctx.scenario, dev.type, round(wall, 2), res.iterations, res.global_step, regions, table, str(out)
    )


def region_lines(report: ProfileReport) -> list[str]:
    """The phase table as text lines."""
    dev = "device_ms" in next(iter(report.regions.values()), {})
    head = f"  {'phase':<22}{'calls':>8}{'cpu ms':>11}{'share':>8}" + (f"{'device ms':>11}" if dev else "")
    lines = [head]
    for name, r in report.regions.items():
        shown = "    reward (in env_step)" if name == "reward" else f"  {name}"
        lines.append(
            f"{shown:<24}{int(r['calls']):>8}{r['cpu_ms']:>11.1f}{r['share']:>8.1%}"
            + (f"{r['device_ms']:>11.1f}" if dev else "")
        )
    return lines


__all__ = ["REGIONS", "ProfileReport", "profile_training", "region_lines"]
