"""From an agent's observe-mode traces to ``rlops run``'s gated promotion, then serve mode by one
argument: the OpenAI Agents SDK agent of :mod:`tests.integrations.test_openai_agents_observe` and the
AutoGen team of :mod:`tests.integrations.test_autogen_observe`, plugged in as they are there.

In a project home of its own, with the repository's ``params.yaml`` as shipped (its gates and the
demo's budgets; only the storage, MLflow and label-queue locations moved under tmp), the agent runs
in observe mode on a few more applications than ``ope.min_episodes``; ``rlops run --scenario S
--run-key K`` then runs in its own process on the interval covering their rows: capture accepts
every row, a candidate is trained in the sandbox calibrated to them and passes the stress test and
the sandbox's gates, and the off-policy gate cannot judge it: the adapters write no ``reward_total``
(a ``RewardProvider``'s score is traced as the breakdown component ``hook:<name>``, never as
``reward_total``), so the evidence is insufficient and the candidate is held at the canary stage
(docs/promotion-evidence.md): ``challenger`` at 5 %, no ``champion``.

The same agent switched to ``mode="serve"``, its client following the registry, then serves exactly
that: the challenger decides the applications whose key routes to its share, the rule engine
(fallback ``no_champion``) every other one; and the live A/B the roll-out judges the challenger by
reads the rule engine's episodes as its control.

Each case takes about half a minute on two cores (``pytest -m slow``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from agents import set_trace_processors

from rlops.agent_sdk.serving import hash_fraction
from rlops.common.config import REPO_ROOT
from rlops.common.run_key import RunKey
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.promotion.evaluate_live import live_ab_gates
from rlops.registry.client import Tracker
from tests.integrations import test_autogen_observe as autogen
from tests.integrations import test_openai_agents_observe as openai_agents
from tests.integrations.conftest import capture, landing_rows
from tests.integrations.loan_agent import queue

pytestmark = pytest.mark.slow

#: The gate table's rows judged in the sandbox, each of which the candidate passes.
SANDBOX_GATES = {"mean_return", "completion_rate", "handling_ms", "human_takeover_rate", "illegal_action_rate"}
SERVED = 60  # applications in serve mode: a 5 % share of them routes to the challenger


@dataclass(frozen=True)
class Project:
    """A project home as a user's: its params, and what the agent's rlops lines are given."""

    home: Path
    params: dict[str, Any]
    world: dict[str, Any]
    """``tracking_uri`` and ``landing`` (the landing zone's folder), as the observe tests' ``plug_in`` takes."""


@pytest.fixture
def project(_mlflow_template_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["storage"]["root"] = f"file://{tmp_path / 'data'}"
    params["tracking"]["uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params["tracking"]["artifact_root"] = str(tmp_path / "mlartifacts")
    params["label_queue"]["db_url"] = f"sqlite:///{tmp_path / 'queue.db'}"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    shutil.copyfile(_mlflow_template_db, tmp_path / "mlflow.db")  # migrated once per session
    monkeypatch.setenv("RLOPS_PARAMS", str(tmp_path / "params.yaml"))
    monkeypatch.setenv("RLOPS_HOME", str(tmp_path))
    for var in ("RLOPS_STORAGE_ROOT", "RLOPS_QUEUE_DB", "MLFLOW_TRACKING_URI", "RLOPS_ARTIFACT_ROOT"):
        monkeypatch.delenv(var, raising=False)
    landing = StepContext.create(str(params["scenario"]), "20260105T1000").traces.landing_uri
    assert landing.startswith("file://"), landing
    world = {"tracking_uri": params["tracking"]["uri"], "landing": landing.removeprefix("file://")}
    return Project(tmp_path, params, world)


#: An agent run: ``(world, mode, applications, seed)`` → its client's stats and its episode ids.
AgentRun = Callable[[dict[str, Any], str, int, int], tuple[dict[str, Any], set[str]]]


def openai_agents_run(world: dict[str, Any], mode: str, n: int, seed: int) -> tuple[dict[str, Any], set[str]]:
    set_trace_processors([])  # offline: no export to the OpenAI tracing backend
    loans = queue(n, seed=seed)
    choice, client, tracer = openai_agents.plug_in(world, mode=mode)
    asyncio.run(openai_agents.handle(choice, loans))
    tracer.close()
    set_trace_processors([])
    stats = client.stats()
    client.close()
    return stats, {loan["application_id"] for loan in loans}


def autogen_run(world: dict[str, Any], mode: str, n: int, seed: int) -> tuple[dict[str, Any], set[str]]:
    applications = autogen.applications(n, seed=seed)
    selector, team, client, tracer = autogen.plug_in(world, mode=mode)
    asyncio.run(autogen.handle(selector, team, applications))
    tracer.close()
    stats = client.stats()
    client.close()
    return stats, {a["application_id"] for a in applications}


def rlops(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user types it, in its own process (it ends with ``os._exit``)."""
    return subprocess.run(
        [sys.executable, "-m", "rlops.cli", *args],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=900,
    )


def gate_table(stdout: str) -> dict[str, tuple[str, str]]:
    """``rlops run``'s gate table: gate → (state, the row as printed)."""
    table = stdout.split("gated evaluation", 1)[1].split("(what each row", 1)[0]
    rows = [line for line in table.splitlines()[2:] if line.strip()]
    return {line.split()[0]: (line.split()[-1], line) for line in rows}


def served_rows(world: dict[str, Any], ids: set[str]) -> list[dict[str, Any]]:
    return [r for r in landing_rows(world["landing"]) if r["episode_id"] in ids]


def covering(rows: list[dict[str, Any]]) -> RunKey:
    """The run key of the whole minutes the rows were written in."""
    stamps = [datetime.fromisoformat(r["ts"]) for r in rows]
    return RunKey.covering(min(stamps), max(stamps))


@pytest.mark.parametrize(
    ("scenario", "agent"),
    [("credit_approval", openai_agents_run), ("loan_desk", autogen_run)],
    ids=["openai-agents", "autogen"],
)
def test_observe_traces_train_a_candidate_held_at_the_canary_stage_that_serve_mode_then_serves(
    project: Project, scenario: str, agent: AgentRun
) -> None:
    # Observe: the agent's own choices, on enough applications for the off-policy gate to look at them.
    applications = int(project.params["ope"]["min_episodes"]) + 20
    stats, ids = agent(project.world, "observe", applications, 40)
    assert stats["decisions"] == 0  # the policy was never asked
    rows = served_rows(project.world, ids)
    assert {r["episode_id"] for r in rows} == ids
    assert all(r["logging_policy"] == "agent_router" and r["logp"] == 0.0 for r in rows)
    assert all("reward_total" not in r for r in rows)  # what the off-policy gate will miss
    out = rlops("run", "--scenario", scenario, "--run-key", str(covering(rows)))
    log = out.stdout[-6000:] + out.stderr[-3000:]
    assert out.returncode == 0, log
    n = len(rows)
    assert f"captured {n} trace rows from the agents' landing zone: {n} accepted, 0 quarantined" in out.stdout, log
    assert re.search(rf"candidate {scenario}-policy v1: mean return -?\d", out.stdout), log
    assert "[7/8] stress test: pass" in out.stdout, log
    gates = gate_table(out.stdout)
    assert all(state in ("pass", "skipped") for state, _ in gates.values()), gates
    assert {g for g in SANDBOX_GATES if gates[g][0] == "pass"} == SANDBOX_GATES, gates
    assert gates["ope:dr"][0] == "skipped" and gates["sandbox:trust"][0] == "skipped", gates
    # The hold and its reason: every logged row lacks the reward the off-policy estimate weighs.
    hold = (
        "held at the canary stage: the off-policy evidence is insufficient "
        f"({n} of {n} logged rows carry no finite reward_total)"
    )
    assert f"STAGED (a challenger serves a share of traffic): all gates pass; {hold}" in out.stdout, log
    assert "champion: none (the rule engine serves)" in out.stdout, log
    tracker = Tracker.from_params(project.params, scenario=scenario)
    model = f"{scenario}-policy"
    assert tracker.get_alias(model, "champion") is None
    assert tracker.get_alias(model, "challenger") == "1"
    assert tracker.model_version_tags(model, "1")["traffic_fraction"] == "0.05"

    # Serve: the one argument changed; the client follows the registry: the challenger takes the
    # applications its share routes to it, the rule engine (no champion yet) every other one.
    stats, ids = agent(project.world, "serve", SERVED, 41)
    rows = served_rows(project.world, ids)
    assert stats["champion"] is None and stats["challenger"] == f"{model}/1" and stats["challenger_fraction"] == 0.05
    challenger = {i for i in ids if hash_fraction(i, scenario) < 0.05}  # the client's routing by key
    assert 0 < len(challenger) < len(ids), challenger
    assert {r["episode_id"] for r in rows if r["test_group"] == "challenger"} == challenger
    for r in rows:
        if r["episode_id"] in challenger:
            assert r["policy_version"] == f"{model}/1" and r["test_group"] == "challenger" and not r["fallback"], r
        else:
            assert r["policy_version"] == "rules" and r["test_group"] == "fallback", r
            assert r["fallback_reason"].startswith("no_champion"), r
    rules = sum(1 for r in rows if r["episode_id"] not in challenger)
    assert stats["decisions"] == len(rows) and stats["fallbacks"] == {"no_champion": rules}

    # What the roll-out's live A/B reads once they are captured: the challenger's episodes against the
    # rule engine's, too few yet to judge (evaluate.ab_min_episodes per group).
    assert capture(scenario, rows)["rows_quarantined"] == 0
    ctx = StepContext.create(scenario, str(covering(rows)))
    ab, note = live_ab_gates(ctx, ctx.load_pack(calibration=None), "1", ctx.config.evaluate, window_hours=1)
    assert note == f"{len(challenger)} challenger / {len(ids) - len(challenger)} control episodes", note
    assert [g.gate for g in ab] == ["ab:live_traffic"] and ab[0].skipped, ab
