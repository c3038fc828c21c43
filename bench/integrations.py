"""Decision latency inside the agent, per framework, with the trained policy in the loop.

For each framework example (LangGraph, OpenAI Agents SDK, AutoGen) the agent handles ``--applications``
applications offline, its next tool chosen by ``PolicyClient`` serving a champion trained by the
product's training step (``train_policy``, PPO, ``--timesteps``) in a temporary registry; the figure is
the adapter's decision time as the agent sees it (``DecisionLoop.decision_ms``: the state mapping, the
policy's decision with its rule-engine fallback armed, the trace bookkeeping), p50 and p99, beside the
whole step (decision + the tool + the framework's own overhead) and the fallbacks (0 when the champion
served every decision). Load average at start and end; the LAST line is one JSON object.

    python bench/integrations.py [--applications 100] [--timesteps 512]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "langgraph": ("credit_approval", ROOT / "examples" / "langgraph" / "credit_agent.py"),
    "openai_agents": ("credit_approval", ROOT / "examples" / "openai_agents" / "credit_agent.py"),
    "autogen": ("loan_desk", ROOT / "examples" / "autogen" / "loan_desk_team.py"),
}


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{path.parent.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)], 3)


def train_champions(folder: Path, timesteps: int) -> str:
    """A registry in ``folder`` whose champions are trained by the product's training step."""
    from rlops.common.policy_ref import policy_model_name
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    tracking = f"sqlite:///{folder / 'mlflow.db'}"
    os.environ.update(
        MLFLOW_TRACKING_URI=tracking,
        RLOPS_ARTIFACT_ROOT=str(folder / "artifacts"),
        RLOPS_STORAGE_ROOT=f"file://{folder / 'storage'}",
    )
    for scenario in sorted({s for s, _ in EXAMPLES.values()}):
        overrides = {
            "local_dir": str(folder / "local"),
            "train": {"num_envs": 16, "eval_episodes": 32},
            "ppo": {"num_steps": 16, "device": "cpu"},
        }
        ctx = StepContext.create(scenario, "20260105T1000", overrides=overrides)
        version = str(train_policy(ctx, TrainRequest(timesteps=timesteps)).model_version)
        ctx.tracker.set_alias(policy_model_name(scenario), "champion", version)
    return tracking


def run(name: str, module: ModuleType, n: int, landing: str, tracking: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    if name == "langgraph":
        out = module.run_agent(module.applications(n, seed=100), landing, tracking)
    elif name == "openai_agents":
        out = asyncio.run(module.run_agent(module.applications(n, seed=100), landing, tracking))
    else:
        out = asyncio.run(module.run_team(module.applications(n, seed=100), landing, tracking))
    wall = time.perf_counter() - t0
    ms = out["decision_ms"]
    return {
        "decisions": out["decisions"],
        "fallbacks": sum(out["fallbacks"].values()),
        "decision_p50_ms": percentile(ms, 0.50),
        "decision_p99_ms": percentile(ms, 0.99),
        "decision_mean_ms": round(statistics.fmean(ms), 3),
        "step_mean_ms": round(wall * 1000 / max(out["decisions"], 1), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--applications", type=int, default=100, help="applications per framework")
    parser.add_argument("--timesteps", type=int, default=512, help="the champions' training budget")
    args = parser.parse_args()
    start_load = report_load("start")
    folder = Path(tempfile.mkdtemp(prefix="rlops-bench-integrations-"))
    try:
        tracking = train_champions(folder, args.timesteps)
        modules = {name: load(path) for name, (_, path) in EXAMPLES.items()}
        results = {
            name: run(name, modules[name], args.applications, str(folder / f"landing-{name}"), tracking)
            for name in EXAMPLES
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    end_load = report_load("end")
    print(
        json.dumps(
            {
                "bench": "integrations",
                "applications": args.applications,
                "timesteps": args.timesteps,
                "frameworks": results,
                "loadavg_start": start_load,
                "loadavg_end": end_load,
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
