"""Where the time of a training run goes (``rlops profile``).

PPO runs on the pack for a bounded wall time; ``torch.profiler`` records a sample of consecutive
iterations of it (the first iteration, which carries one-time costs, and one warm-up iteration are
skipped). The training loop and the sandbox mark their phases with ``record_function`` labels
(``rlops/env_step`` with ``rlops/reward`` inside it, ``rlops/policy_forward``, ``rlops/advantages``,
``rlops/backward``, ``rlops/optimizer``, ``rlops/data_movement``); the report gives each phase's
total time and share of the recorded iterations' wall time, the ten most expensive operators by
self time, a Chrome trace (open it in ``chrome://tracing`` or https://ui.perfetto.dev), and the
wall time of an iteration with and without the profiler, so its overhead is on the page.

Only a sample is recorded because the profiler's own bookkeeping is what does not scale: turning
its events into a report costs ~70 µs per event on a CPU core, and a second of training at 1,024
envs records ~200,000 of them — a minute recorded whole took a quarter of an hour to report.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlops.model.device import resolve_device
from rlops.model.ppo import train
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.training.policy import ppo_config
from rlops.sandbox.profiles import default_profile

REGIONS = ("env_step", "reward", "policy_forward", "advantages", "backward", "optimizer", "data_movement")
"""The labelled phases (``rlops.<name>``); ``reward`` runs inside ``env_step``."""

SKIPPED_ITERATIONS = 2
"""Iterations run before the recorded sample: the first (one-time costs) and a profiler warm-up."""


@dataclass
class ProfileReport:
    """Time per phase (ms and share of the recorded iterations' wall time), the top operators table,
    the trace file, and an iteration's wall time with and without the profiler."""

    scenario: str
    device: str
    wall_s: float
    iterations: int
    global_step: int
    recorded: list[int] = field(default_factory=list)
    """The iteration numbers the profiler recorded."""
    recorded_wall_s: float = 0.0
    iteration_ms_profiled: float = 0.0
    """Median wall time of a recorded iteration."""
    iteration_ms_unprofiled: float | None = None
    """Median wall time of the iterations after the sample (None when the run ended with it)."""
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
    sample_iterations: int = 3,
) -> ProfileReport:
    """Train for about ``duration_s`` seconds (and at least until the sample is recorded); profile
    ``sample_iterations`` consecutive iterations after the first two and report where the time went."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    if sample_iterations < 1:
        raise ValueError(f"sample_iterations {sample_iterations}: expected at least one iteration to record")
    pack = ctx.load_pack()
    label = ctx.reward_choice(reward_fn, pack).reward_fn
    profile_name = default_profile(pack, "sandbox", ctx.config.train.profile)
    # A budget no run reaches in ``duration_s``: the clock, not the step count, ends the run.
    plan = ppo_config(
        ctx.config.train,
        ctx.config.ppo,
        pack,
        "full",
        10**12,
        None,
        device=device,
        progress=False,
        plateau_eval_every=0,
    )
    dev = resolve_device(plan.config.device)
    env = pack.make_env(plan.num_envs, reward_fn=label, profile=profile_name, device=dev.type, seed=plan.config.seed)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    first, last = SKIPPED_ITERATIONS + 1, SKIPPED_ITERATIONS + sample_iterations
    ends: list[float] = []  # wall clock at the end of each iteration

    def on_iteration(it: int, policy: Any, metrics: dict[str, float]) -> bool:
        if dev.type == "cuda":
            torch.cuda.synchronize()  # an iteration's wall time includes its device work
        ends.append(time.perf_counter())
        prof.step()  # the schedule moves one iteration on
        return it >= last and ends[-1] - t0 >= duration_s

    # wait 1 (the first iteration), warm up 1, record ``sample_iterations``, once
    sched = schedule(wait=SKIPPED_ITERATIONS - 1, warmup=1, active=sample_iterations, repeat=1)
    t0 = time.perf_counter()
    with profile(activities=activities, schedule=sched) as prof:
        res = train(plan.config, env, on_iteration=on_iteration)
    wall = time.perf_counter() - t0
    iteration_s = [b - a for a, b in zip([t0, *ends], ends)]  # iteration i is iteration_s[i - 1]
    recorded = list(range(first, min(last, len(ends)) + 1))
    recorded_wall = sum(iteration_s[i - 1] for i in recorded)
    after = iteration_s[last:]
    averages = prof.key_averages()
    on_device = dev.type == "cuda"
    regions: dict[str, dict[str, float]] = {}
    for ev in averages:
        if ev.key.startswith("rlops/") and ev.key[6:] in REGIONS:
            cpu_ms = ev.cpu_time_total / 1e3
            share = cpu_ms / 1e3 / recorded_wall if recorded_wall > 0 else 0.0
            row = {"calls": float(ev.count), "cpu_ms": round(cpu_ms, 1), "share": round(share, 4)}
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
        ctx.scenario,
        dev.type,
        round(wall, 2),
        res.iterations,
        res.global_step,
        recorded,
        round(recorded_wall, 3),
        round(1e3 * statistics.median(iteration_s[i - 1] for i in recorded), 1) if recorded else 0.0,
        round(1e3 * statistics.median(after), 1) if after else None,
        regions,
        table,
        str(out),
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
    # Python between the labelled operators, the profiler's own bookkeeping and unlabelled ops
    outside = 1.0 - sum(r["share"] for name, r in report.regions.items() if name != "reward")
    lines.append(f"{'  outside the phases':<24}{'':>8}{'':>11}{max(outside, 0.0):>8.1%}")
    return lines


def timing_line(report: ProfileReport) -> str:
    """Which iterations were recorded, and an iteration's wall time with and without the profiler."""
    span = f"{report.recorded[0]}–{report.recorded[-1]}" if len(report.recorded) > 1 else str(report.recorded[0])
    without = (
        f", {report.iteration_ms_unprofiled:.0f} ms without it (the {report.iterations - report.recorded[-1]} "
        "iterations after the sample)"
        if report.iteration_ms_unprofiled is not None
        else ""
    )
    return (
        f"recorded iterations {span} of {report.iterations}: {report.iteration_ms_profiled:.0f} ms each under the "
        f"profiler{without}; shares are of the recorded iterations' {report.recorded_wall_s:.2f}s"
    )


__all__ = ["REGIONS", "SKIPPED_ITERATIONS", "ProfileReport", "profile_training", "region_lines", "timing_line"]
