"""Decision latency inside the agent, per framework, with the trained policy in the loop and tracing on.

For each framework example (LangGraph, OpenAI Agents SDK, AutoGen) the agent handles applications offline
until it has made at least ``--decisions`` decisions (or exactly ``--applications`` applications), its next
tool chosen by ``PolicyClient`` serving a champion trained by the product's training step
(``train_policy``, PPO, ``--timesteps``) in a temporary registry; the figure is the adapter's decision
time as the agent sees it (``DecisionLoop.decision_ms``: the state mapping, the policy's decision with its
rule-engine fallback armed, the trace bookkeeping), p50 and p99, beside the whole step (the wall time per
decision: the decision, the tool, the framework's own overhead, the tracing, and each round's client start)
and the fallbacks by cause.

Tracing (``--tracing openinference``, the default): the rlops tracer writes every decision to the landing
zone, and OpenInference's instrumentor of the framework is on while its agent runs —
``LangChainInstrumentor`` for LangGraph, ``OpenAIAgentsInstrumentor`` for the OpenAI Agents SDK — exporting
to an OpenTelemetry SDK ``TracerProvider`` through a ``BatchSpanProcessor`` and the OTLP/JSON file exporter
``rlops capture --otlp-file`` reads; the spans exported are counted (and the decision spans among them, the
ones carrying ``rlops.decision``, which the LangGraph router sets), and the instrumentor is uninstrumented
after the framework's run. AutoGen runs with the rlops tracer only: no OpenInference instrumentor for
autogen-agentchat is pinned (requirements/lock.txt). ``--tracing none`` runs every framework with the rlops
tracer only.

The bar, per framework: p99 below the policy client's default timeout (``ClientSettings.timeout_ms``) and
no decision that hit it (the client's ``timeout`` fallbacks). Load average at start and end; the LAST line
is one JSON object; ``--record HOST_CLASS`` appends the run to ``bench/results/integrations.<HOST_CLASS>.json``
(then ``python bench/results_table.py`` rewrites the table of docs/benchmarks.md).

    python bench/integrations.py [--decisions 1000 | --applications 40] [--timesteps 512]
                                 [--tracing openinference|none] [--record HOST_CLASS --host NOTE]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.agent_sdk.mlflow_tracing import DECISION_ATTRIBUTE  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "langgraph": ("credit_approval", ROOT / "examples" / "langgraph" / "credit_agent.py"),
    "openai_agents": ("credit_approval", ROOT / "examples" / "openai_agents" / "credit_agent.py"),
    "autogen": ("loan_desk", ROOT / "examples" / "autogen" / "loan_desk_team.py"),
}
# the OpenInference instrumentor of each framework (module, class); None: none is pinned in requirements/lock.txt
INSTRUMENTORS: dict[str, tuple[str, str] | None] = {
    "langgraph": ("openinference.instrumentation.langchain", "LangChainInstrumentor"),
    "openai_agents": ("openinference.instrumentation.openai_agents", "OpenAIAgentsInstrumentor"),
    "autogen": None,
}
TRACING = ("openinference", "none")


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


def default_timeout_ms() -> float:
    """The timeout a ``PolicyClient`` built without ``timeout_ms`` has, as the examples build theirs."""
    from rlops.agent_sdk.client_settings import ClientSettings

    return float(ClientSettings().timeout_ms)


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


class SpanExport:
    """OpenInference's instrumentor of one framework on while its agent runs, exporting to an OpenTelemetry
    SDK ``TracerProvider`` (a ``BatchSpanProcessor`` in front of the OTLP/JSON file exporter); on exit the
    provider is flushed, the instrumentor uninstrumented, and :attr:`spans` and :attr:`decision_spans`
    count what was exported."""

    def __init__(self, instrumentor: tuple[str, str], path: Path) -> None:
        self.instrumentor_name, self.path = instrumentor, path
        self.spans = self.decision_spans = 0

    def __enter__(self) -> SpanExport:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from rlops.integrations.otlp import OtlpJsonFileExporter

        module, name = self.instrumentor_name
        self.exporter = OtlpJsonFileExporter(self.path)
        self.provider = TracerProvider()
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.instrumentor = getattr(importlib.import_module(module), name)()
        self.instrumentor.instrument(tracer_provider=self.provider)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.provider.force_flush()
        self.instrumentor.uninstrument()
        self.provider.shutdown()
        self.spans = int(self.exporter.exported)
        self.decision_spans = count_decision_spans(self.path)


def count_decision_spans(path: Path) -> int:
    """Spans of an OTLP/JSON file carrying ``rlops.decision`` (what ``rlops capture`` turns into rows)."""
    if not path.exists():
        return 0
    return sum(
        any(a["key"] == DECISION_ATTRIBUTE for a in span.get("attributes", []))
        for line in path.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    )


def run_round(name: str, module: ModuleType, queue: list[Any], landing: str, tracking: str, traced: bool) -> Any:
    """One run of the framework's example over ``queue``: its decision counts and times."""
    if name == "langgraph":
        return module.run_agent(queue, landing, tracking)
    if name == "openai_agents":  # the example drops every trace processor unless told to keep the instrumentor's
        return asyncio.run(module.run_agent(queue, landing, tracking, keep_trace_processors=traced))
    return asyncio.run(module.run_team(queue, landing, tracking))


def run(
    name: str,
    module: ModuleType,
    applications: int | None,
    decisions: int,
    folder: Path,
    tracking: str,
    traced: bool,
) -> dict[str, Any]:
    """The framework's agent on ``applications`` applications, or in rounds until ``decisions`` are made."""
    ms: list[float] = []
    fallbacks: collections.Counter[str] = collections.Counter()
    made = handled = rounds = 0
    # a credit application takes about three decisions, a loan desk's one or two
    n = applications if applications is not None else max(1, math.ceil(decisions / 3))
    t0 = time.perf_counter()
    while n > 0:
        queue = module.applications(n, seed=100 + rounds)  # another seed each round: other episode ids
        out = run_round(name, module, queue, str(folder / f"landing-{name}-{rounds}"), tracking, traced)
        made, handled, rounds = made + out["decisions"], handled + n, rounds + 1
        ms.extend(out["decision_ms"])
        fallbacks.update(out["fallbacks"])
        left = 0 if applications is not None else decisions - made
        n = math.ceil(left * handled / max(made, 1) * 1.1) if left > 0 else 0  # at the rate so far, with a margin
    wall = time.perf_counter() - t0
    return {
        "applications": handled,
        "rounds": rounds,
        "decisions": made,
        "fallbacks": sum(fallbacks.values()),
        "fallbacks_by_cause": dict(fallbacks),
        "timeouts": fallbacks.get("timeout", 0),
        "decision_p50_ms": percentile(ms, 0.50),
        "decision_p99_ms": percentile(ms, 0.99),
        "decision_max_ms": round(max(ms), 3),
        "decision_mean_ms": round(statistics.fmean(ms), 3),
        "step_mean_ms": round(wall * 1000 / max(made, 1), 3),
    }


def measure(
    name: str, module: ModuleType, args: argparse.Namespace, folder: Path, tracking: str, timeout_ms: float
) -> dict[str, Any]:
    """The framework's figures with its tracing, and its bar judged on them."""
    instrumentor = INSTRUMENTORS[name] if args.tracing == "openinference" else None
    if instrumentor is None:
        figures = run(name, module, args.applications, args.decisions, folder, tracking, traced=False)
        tracing: dict[str, Any] = {"tracing": "rlops tracer only", "spans": None, "decision_spans": None}
        if args.tracing == "openinference":
            tracing["tracing"] += " (no OpenInference instrumentor for it is pinned in requirements/lock.txt)"
    else:
        with SpanExport(instrumentor, folder / f"spans-{name}.jsonl") as export:
            figures = run(name, module, args.applications, args.decisions, folder, tracking, traced=True)
        tracing = {
            "tracing": f"rlops tracer + OpenInference {instrumentor[1]} (OTLP/JSON file export)",
            "spans": export.spans,
            "decision_spans": export.decision_spans,
        }
    p99_ok = figures["decision_p99_ms"] < timeout_ms
    return {
        **figures,
        **tracing,
        "p99_below_timeout": p99_ok,
        "bar_met": p99_ok and figures["timeouts"] == 0,
    }


def summary(name: str, f: dict[str, Any]) -> str:
    spans = ""
    if f["spans"] is not None:
        decision_spans = f", {f['decision_spans']:,} of them decision spans" if f["decision_spans"] else ""
        spans = f" {f['spans']:,} OpenInference spans exported{decision_spans};"
    causes = ", ".join(f"{k} {v}" for k, v in sorted(f["fallbacks_by_cause"].items())) or "none"
    return (
        f"{name}: p50 {f['decision_p50_ms']} ms, p99 {f['decision_p99_ms']} ms, {f['timeouts']} timeouts in "
        f"{f['decisions']:,} decisions (fallbacks: {causes});{spans} step mean {f['step_mean_ms']} ms"
    )


def record(path: Path, host_class: str, result: dict[str, Any], command: str, host: str) -> None:
    """Append this run to the results file of ``host_class`` (created when it is the first)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    doc: dict[str, Any] = (
        json.loads(path.read_text())
        if path.exists()
        else {"bench": "integrations", "host_class": host_class, "host": host, "runs": []}
    )
    frameworks = result["frameworks"]
    traced = {
        "openinference": "OpenInference instrumentors on (LangChainInstrumentor, OpenAIAgentsInstrumentor; "
        "AutoGen: rlops tracer only, no instrumentor pinned), spans exported over OTLP/JSON",
        "none": "rlops tracer only",
    }[result["tracing"]]
    doc["runs"].append(
        {
            "date": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "commit": commit or "unknown",
            "command": command,
            "what": (
                "decision latency inside each framework example (LangGraph router node, OpenAI Agents SDK "
                "tool-choice model wrapper, AutoGen SelectorGroupChat selector) with a champion trained by "
                f"train_policy serving through PolicyClient; {traced}; timeouts = the client's timeout fallbacks"
            ),
            "host": host,
            "load_average": [[result["loadavg_start"][0], result["loadavg_end"][0]]],
            "rlops": "; ".join(summary(name, f) for name, f in frameworks.items()),
            "peer": "—",
            "ratio": "—",
            "bar": f"per framework: p99 < the default timeout ({result['timeout_ms']:g} ms) and 0 timeouts",
            "bar_met": result["bar_met"],
            "figures": {"timeout_ms": result["timeout_ms"], "tracing": result["tracing"], **frameworks},
        }
    )
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    print(f"recorded in {path.relative_to(ROOT)}")


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, str]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--decisions", type=int, default=1000, help="at least this many decisions per framework")
    size.add_argument("--applications", type=int, help="exactly this many applications per framework instead")
    parser.add_argument("--timesteps", type=int, default=512, help="the champions' training budget")
    parser.add_argument("--tracing", choices=TRACING, default="openinference", help="OpenInference instrumentors on")
    parser.add_argument("--record", metavar="HOST_CLASS", help="append the run to bench/results/")
    parser.add_argument("--host", default="", help="a line about the host, recorded with --record")
    args = parser.parse_args(argv)
    if args.decisions < 1 or (args.applications is not None and args.applications < 1):
        parser.error("--decisions and --applications must each be at least 1")
    size_flag = f"--applications {args.applications}" if args.applications else f"--decisions {args.decisions}"
    command = f"bench/integrations.py {size_flag} --timesteps {args.timesteps} --tracing {args.tracing}"
    return args, command


def main(argv: list[str] | None = None) -> int:
    args, command = parse(argv)
    start_load = report_load("start")
    timeout_ms = default_timeout_ms()
    folder = Path(tempfile.mkdtemp(prefix="rlops-bench-integrations-"))
    try:
        tracking = train_champions(folder, args.timesteps)
        modules = {name: load(path) for name, (_, path) in EXAMPLES.items()}
        results = {name: measure(name, modules[name], args, folder, tracking, timeout_ms) for name in EXAMPLES}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    end_load = report_load("end")
    for name, figures in results.items():
        print(f"{summary(name, figures)}; bar {'met' if figures['bar_met'] else 'NOT met'}", flush=True)
    result = {
        "bench": "integrations",
        "command": command,
        "tracing": args.tracing,
        "applications": args.applications,
        "decisions_target": None if args.applications else args.decisions,
        "timesteps": args.timesteps,
        "timeout_ms": timeout_ms,
        "frameworks": results,
        "bar_met": all(f["bar_met"] for f in results.values()),
        "loadavg_start": start_load,
        "loadavg_end": end_load,
        "cpus": os.cpu_count(),
    }
    if args.record:
        record(ROOT / "bench" / "results" / f"integrations.{args.record}.json", args.record, result, command, args.host)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
