"""The slim agent package (``agent/pyproject.toml``, distribution ``rlops-agent``) installs alone into
a fresh virtualenv, with neither torch, Airflow, DVC nor Great Expectations in its closure, and
there computes a pack's masks and serves the champion registered on a real MLflow server from its
numpy export, as the torch client in this process does; with its ``[langgraph]`` extra alone it runs
the LangGraph example agent through ``rlops.integrations.langgraph``. Slow: each test builds a venv
and installs the pinned dependencies from the machine's configured package index (the framework's
own dependencies held to requirements/lock.txt). ``test_slim_closure.py`` checks the integrations'
imports without installing anything."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rlops.agent_sdk.masks import ActionMasker
from rlops.agent_sdk.policy_client import PolicyClient
from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.context import StepContext
from rlops.sandbox.pack import load_pack
from tests.agent_sdk.client_kit import NAME, PACK_DIR, SCENARIO, STATE, register_pair

HEAVY = ("torch", "airflow", "dvc", "great_expectations", "pandas", "rlops.sandbox.pack")
#: Distributions neither install may bring.
NOT_INSTALLED = {"torch", "apache-airflow", "dvc", "great-expectations", "rlops"}

SLIM_SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, sys
    heavy = sys.argv[1].split(",")
    missing = {m: importlib.util.find_spec(m.split(".")[0]) is None for m in heavy if "." not in m}
    from rlops.agent_sdk import Tracer
    from rlops.agent_sdk.masks import ActionMasker
    from rlops.agent_sdk.policy_client import PolicyClient
    masker = ActionMasker.from_pack(sys.argv[3])
    state = json.loads(sys.argv[4])
    from rlops.agent_sdk import Episode
    with PolicyClient(sys.argv[2], "credit_approval", sys.argv[3], refresh_every_s=None, timeout_ms=5000) as c:
        d = c.decide(state, history=["fetch_credit_report"])
        with Tracer(sys.argv[5]) as tracer:
            with Episode(tracer, scenario="credit_approval", policy_version=d.policy_version) as ep:
                ep.annotate(**d.trace_fields())
                ep.step(state, d.action, done=True)
        out = {
            "missing": missing,
            "loaded": sorted(m for m in heavy if m in sys.modules),
            "mask": masker.mask(state, history=["fetch_credit_report"]),
            "runtime": c.runtime,
            "action": d.action, "probs": d.probs, "mask_served": d.mask,
            "version": d.policy_version, "fallback": d.fallback_reason,
        }
    print(json.dumps(out))
    """
)


def _run(cmd: list[str], **kw: Any) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, **kw)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def _agent_venv(tmp_path: Path, extras: str, *pip_args: str) -> tuple[str, set[str]]:
    """A fresh venv holding the agent package with ``extras`` and nothing else; its python and the
    distributions installed there."""
    # the package's sources copied out, so building it leaves nothing in the repository
    src = tmp_path / "src"
    shutil.copytree(REPO_ROOT / "agent", src / "agent", ignore=shutil.ignore_patterns("build"))
    shutil.copytree(REPO_ROOT / "rlops", src / "rlops", ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    wheels = tmp_path / "wheels"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(src / "agent"),
        ]
    )
    (wheel,) = wheels.glob("rlops_agent-*.whl")
    _run([py, "-m", "pip", "install", "--quiet", *pip_args, f"{wheel}[{extras}]"])
    installed = {d["name"].lower() for d in json.loads(_run([py, "-m", "pip", "list", "--format=json"]))}
    assert not installed & NOT_INSTALLED, installed
    return py, installed


@pytest.mark.slow
def test_the_agent_package_installs_alone_and_serves_the_champion_without_torch(
    tmp_path: Path, mlflow_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the champion, registered on a real server (artifacts proxied over HTTP, as in a deployment)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    monkeypatch.delenv("RLOPS_ARTIFACT_ROOT", raising=False)
    v1, _ = register_pair(load_pack(PACK_DIR, check_liveness=False))
    StepContext.create(run_key="20260105T1000").tracker.set_alias(NAME, "champion", v1)

    py, installed = _agent_venv(tmp_path, "registry")
    assert {"rlops-agent", "numpy", "pyyaml", "mlflow-skinny"} <= installed

    landing = tmp_path / "landing"
    out = json.loads(
        _run(
            [py, "-c", SLIM_SCRIPT, ",".join(HEAVY), mlflow_server, str(PACK_DIR), json.dumps(STATE), str(landing)],
            cwd=tmp_path,  # not the repository: only the installed package is importable
        ).splitlines()[-1]
    )
    assert out["missing"] == {m: True for m in HEAVY if "." not in m}, out["missing"]
    assert out["loaded"] == []
    assert out["runtime"] == "numpy" and out["fallback"] is None and out["version"] == f"{NAME}/{v1}"
    # the traced step reached the landing zone with the served version and its mask
    (written,) = [json.loads(line) for f in landing.rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert written["action"] == out["action"] and written["policy_version"] == out["version"]
    assert written["action_mask"] == "".join("1" if m else "0" for m in out["mask"])

    # the same decision, mask and probabilities as the torch client and the sandbox's mask here
    masker = ActionMasker.from_pack(PACK_DIR)
    assert out["mask"] == out["mask_served"] == masker.mask(STATE, history=["fetch_credit_report"])
    with PolicyClient(mlflow_server, SCENARIO, PACK_DIR, runtime="torch", refresh_every_s=None) as client:
        d = client.decide(STATE, history=["fetch_credit_report"])
    assert out["action"] == d.action
    assert max(abs(out["probs"][a] - p) for a, p in d.probs.items()) < 1e-5


LANGGRAPH_SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, sys
    heavy = sys.argv[1].split(",")
    import rlops.integrations.langgraph
    on_import = sorted(m for m in heavy if m in sys.modules)
    spec = importlib.util.spec_from_file_location("credit_agent", sys.argv[2])
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    out = agent.run_agent(agent.applications(4, seed=1), sys.argv[3], "sqlite:///" + sys.argv[4])
    from rlops.integrations import MissingExtraError
    from rlops.integrations.openai_agents import PolicyToolChoice
    try:
        PolicyToolChoice(None, None, pack_path=agent.PACK)
        missing = None
    except MissingExtraError as exc:
        missing = str(exc)
    print(json.dumps({
        "on_import": on_import, "loaded": sorted(m for m in heavy if m in sys.modules),
        "decisions": out["decisions"], "fallbacks": out["fallbacks"], "missing": missing,
    }))
    """
)


@pytest.mark.slow
def test_the_agent_package_with_its_langgraph_extra_runs_a_langgraph_agent_without_torch(tmp_path: Path) -> None:
    """``pip install './agent[langgraph]'`` is all a LangGraph agent needs: the example agent runs there
    (its router served by the pack's rule engine, no registry installed) and traces every decision."""
    py, installed = _agent_venv(tmp_path, "langgraph", "--constraint", str(REPO_ROOT / "requirements" / "lock.txt"))
    assert {"rlops-agent", "langgraph", "langchain-core", "opentelemetry-sdk"} <= installed
    assert not installed & {"pandas", "mlflow", "mlflow-skinny", "openai-agents", "autogen-agentchat"}, installed

    landing = tmp_path / "landing"
    example = REPO_ROOT / "examples" / "langgraph" / "credit_agent.py"
    out = json.loads(
        _run(
            [py, "-c", LANGGRAPH_SCRIPT, ",".join(HEAVY), str(example), str(landing), str(tmp_path / "none.db")],
            cwd=tmp_path,  # not the repository: only the installed package is importable
        ).splitlines()[-1]
    )
    assert out["on_import"] == [] and out["loaded"] == [], out
    rows = [json.loads(line) for f in landing.rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert out["decisions"] == len(rows) > 4 and set(out["fallbacks"]) <= {"load_error", "no_champion"}
    assert {r["policy_version"] for r in rows} == {"rules"} and all(r["action_mask"] for r in rows)
    assert "pip install './agent[openai-agents]'" in out["missing"], out["missing"]
