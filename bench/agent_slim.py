"""Decision latency of the slim agent package: one ``PolicyClient.decide`` (state → mask → exported
policy → action) served from the numpy export in a virtualenv holding only ``rlops-agent`` (no
torch), beside the same client serving the torch pyfunc in the full install, and the numpy runtime
in the full install. Bar: p99 ≤ 1 ms in the slim venv.

A policy of the default training widths is registered on a real ``mlflow server`` (SQLite backend,
artifacts proxied over HTTP, started here) as the champion of the credit pack; every client follows
it as an agent does and decides the same ``--decisions`` production states (a state a request:
the pack's live profile stepped by its rule engine, with the actions taken so far), one request
every ``--request-every-ms`` as an agent receives them between its tool calls. The slim
venv is built under ``--slim-venv`` when it holds no Python yet (the wheel from ``agent/``, its
pinned dependencies from the configured index). Prints the load average at start and end and, last,
one JSON line.

Usage: python bench/agent_slim.py [--decisions 5000] [--slim-venv /tmp/rlops-agent-venv]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = "credit_approval"
PACK = ROOT / "scenarios" / SCENARIO
BAR_P99_MS = 1.0

#: Runs in either interpreter: decides every state of a JSON file through a PolicyClient and prints
#: the latencies (ms) as one JSON line.
DECIDE = textwrap.dedent(
    """
    import json, sys, time
    from rlops.agent_sdk.policy_client import PolicyClient
    uri, pack, runtime, states_file, every_ms = sys.argv[1:6]
    cases = json.load(open(states_file))
    every = float(every_ms) / 1000.0
    with PolicyClient(uri, "credit_approval", pack, runtime=runtime, refresh_every_s=30, timeout_ms=50) as client:
        for state, history in cases[:100]:  # warm-up: first calls allocate
            client.decide(state, history=history)
        out = []
        due = time.perf_counter()
        for state, history in cases:
            due += every  # requests arrive at a steady pace, as at an agent between its tool calls
            time.sleep(max(due - time.perf_counter(), 0.0))
            t0 = time.perf_counter()
            d = client.decide(state, history=history)
            out.append((time.perf_counter() - t0) * 1000.0)
        stats = client.stats()
    print(json.dumps({"runtime": client.runtime, "ms": out, "fallbacks": stats["fallbacks"],
                      "champion": stats["champion"], "torch_loaded": "torch" in sys.modules}))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 4)


def _states(n: int, seed: int) -> list[tuple[dict[str, Any], list[str]]]:
    """``n`` production states with the actions taken so far: the pack's live profile stepped by
    its rule engine, each sandbox row written as an agent has it (nested fields, enum names, bools;
    a field its ``visible_when`` hides is null)."""
    import torch

    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy

    pack = load_pack(PACK, check_liveness=False)
    scn = pack.scenario
    env = pack.make_env(num_envs=256, profile="live", seed=seed)
    history: list[list[str]] = [[] for _ in range(256)]
    out: list[tuple[dict[str, Any], list[str]]] = []
    while len(out) < n:
        hidden = {p: e(env.S).tolist() for p, e in scn.visible.items()}
        for i in range(256):
            if int(env.S[i, scn.columns["episode.step"]]) == 0:
                history[i] = []
            state: dict[str, Any] = {}
            for f in scn.spec.fields:
                if not f.observed:
                    continue
                v = float(env.S[i, scn.columns[f.path]])
                value: Any = v
                if f.path in hidden and not hidden[f.path][i]:
                    value = None
                elif f.type == "enum":
                    value = f.values[int(v)]
                elif f.type == "bool":
                    value = v > 0.5
                node = state
                *parents, leaf = f.path.split(".")
                for part in parents:
                    node = node.setdefault(part, {})
                node[leaf] = value
            out.append((state, list(history[i])))
        with torch.no_grad():
            a = rule_policy(env)
        for i in range(256):
            history[i].append(scn.action_names[int(a[i])])
        env.step(a)
    return out[:n]


def _server(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    import urllib.request

    port = _free_port()
    log = open(work / "server.log", "wb")  # noqa: SIM115 - the server writes to it while the bench runs
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{work / 'mlflow.db'}"]
    cmd += ["--artifacts-destination", str(work / "artifacts"), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen([*cmd, "--workers", "1"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(f"{url}/health", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"mlflow server did not start; see {work / 'server.log'}")


def _register_champion(url: str) -> str:
    import torch

    from rlops.model.policy import PolicyConfig, PolicyNetwork
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.training.candidate import register_policy
    from rlops.sandbox.pack import load_pack

    os.environ["MLFLOW_TRACKING_URI"] = url
    os.environ.pop("RLOPS_ARTIFACT_ROOT", None)
    pack = load_pack(PACK, check_liveness=False)
    torch.manual_seed(0)
    net = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout)).eval()  # the default training widths
    ctx = StepContext.create(SCENARIO, "20260105T1000")
    with ctx.tracker.start_run("bench-agent-slim") as run, tempfile.TemporaryDirectory() as tmp:
        version = str(register_policy(ctx, run, pack, net, {"mode": "full"}, Path(tmp)))
    ctx.tracker.set_alias(f"{SCENARIO}-policy", "champion", version)
    return version


def _slim_python(venv: Path, work: Path) -> str:
    py = venv / "bin" / "python"
    if py.exists():
        return str(py)
    src = work / "src"
    shutil.copytree(ROOT / "agent", src / "agent", ignore=shutil.ignore_patterns("build"))
    shutil.copytree(ROOT / "rlops", src / "rlops", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = work / "wheels"
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels)]
    subprocess.run([*pip, str(src / "agent")], check=True)
    (wheel,) = wheels.glob("rlops_agent-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"{wheel}[registry]"], check=True)
    return str(py)


def _decide(python: str, url: str, runtime: str, states: Path, cwd: Path, every_ms: float) -> dict[str, Any]:
    res = subprocess.run(
        [python, "-c", DECIDE, url, str(PACK), runtime, str(states), str(every_ms)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    if res.returncode != 0:
        raise SystemExit(f"{python} ({runtime}) failed:\n{res.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def _summary(parts: list[dict[str, Any]]) -> dict[str, Any]:
    ms = [x for part in parts for x in part["ms"]]
    fallbacks: dict[str, int] = {}
    for part in parts:
        for kind, k in part["fallbacks"].items():
            fallbacks[kind] = fallbacks.get(kind, 0) + int(k)
    return {
        "runtime": parts[0]["runtime"],
        "champion": parts[0]["champion"],
        "torch_loaded": any(part["torch_loaded"] for part in parts),
        "fallbacks": fallbacks,
        "n": len(ms),
        "p50_ms": _pct(ms, 0.5),
        "p99_ms": _pct(ms, 0.99),
        "max_ms": round(max(ms), 3),
    }


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--decisions", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=5, help="turns each client takes (a slice of the states each)")
    p.add_argument("--request-every-ms", type=float, default=2.0, help="pace of the requests (0: back to back)")
    p.add_argument("--slim-venv", type=Path, default=Path(tempfile.gettempdir()) / "rlops-agent-venv")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rlops-bench-agent-slim-"))
    server, url = _server(work)
    try:
        version = _register_champion(url)
        slim = _slim_python(args.slim_venv, work)
        # the three clients take turns on slices of the states, so a change of the machine's load
        # during the run reaches each of them alike
        cases = _states(args.decisions, seed=1)
        clients = {
            "slim_venv_numpy": (slim, "auto", work),
            "full_install_torch": (sys.executable, "torch", ROOT),
            "full_install_numpy": (sys.executable, "numpy", ROOT),
        }
        parts: dict[str, list[dict[str, Any]]] = {name: [] for name in clients}
        for r in range(args.rounds):
            states = work / f"states-{r}.json"
            states.write_text(json.dumps(cases[r :: args.rounds]))
            for name, (python, runtime, cwd) in clients.items():
                parts[name].append(_decide(python, url, runtime, states, cwd, args.request_every_ms))
        runs = {name: _summary(p) for name, p in parts.items()}
    finally:
        server.terminate()
        server.wait(timeout=30)
    slim_run, torch_run = runs["slim_venv_numpy"], runs["full_install_torch"]
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "bench": "agent_slim",
                "scenario": SCENARIO,
                "champion_version": version,
                "decisions": args.decisions,
                "request_every_ms": args.request_every_ms,
                **runs,
                "torch_over_slim_p50": round(torch_run["p50_ms"] / slim_run["p50_ms"], 2),
                "torch_over_slim_p99": round(torch_run["p99_ms"] / slim_run["p99_ms"], 2),
                "bar_p99_ms": BAR_P99_MS,
                "bar_met": slim_run["p99_ms"] <= BAR_P99_MS and not slim_run["torch_loaded"],
                "load_start": load_start,
                "load_end": load_end,
            }
        )
    )
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
