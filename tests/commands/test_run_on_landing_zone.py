"""``rlops run``: the loop the DAGs run, once, on the traces an agent wrote to the landing zone —
never simulated traffic; an interval whose capture accepted nothing stops the run (exit 2) saying
where the landing files are, instead of training on nothing."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT
from rlops.common.errors import UserError
from rlops.common.run_key import RunKey

SCENARIO = "credit_approval"
START = datetime(2026, 11, 30, 5, 1, tzinfo=UTC)
DEMO = {"capture_episodes": 800, "reward_model_pairs": 400, "timesteps": 16_384, "torch_threads": 1}


def _land_agent_traffic(home: Path, episodes: int) -> int:
    """What an agent's Tracer leaves in the landing zone: the rule engine serving the live profile."""
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / SCENARIO, check_liveness=False)
    df = rollout_traces(
        pack, rule_policy, episodes, seed=5, profile="live", source="live", start_ts=START, episode_prefix="agent"
    )
    folder = home / "data" / "landing" / f"scenario={SCENARIO}" / f"date={START:%Y-%m-%d}" / f"hour={START:%H}"
    folder.mkdir(parents=True, exist_ok=True)
    lines = df.to_json(orient="records", lines=True, date_format="iso")
    (folder / f"{START:%Y%m%dT%H%M%S%f}Z-agent-1-000000.jsonl").write_text(lines)
    return sum(1 for line in lines.splitlines() if json.loads(line))


def _small_budgets(home: Path) -> None:
    params = yaml.safe_load((home / "params.yaml").read_text())
    params["demo"] = DEMO
    (home / "params.yaml").write_text(yaml.safe_dump(params))


def test_an_interval_without_traces_stops_the_run(rlops_home: Path) -> None:
    from rlops import demo

    _small_budgets(rlops_home)
    with pytest.raises(UserError, match="accepted no row, so there is nothing to train on.*no landing file"):
        demo.run(SCENARIO, landing=RunKey.parse("20261130T0500"))


@pytest.mark.slow  # a whole (small) loop: about a minute on two cores
def test_the_loop_runs_on_the_agents_traces(rlops_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlops import demo

    _small_budgets(rlops_home)
    rows = _land_agent_traffic(rlops_home, 300)
    assert demo.run(SCENARIO, landing=RunKey.parse("20261130T0500")) == 0
    out = capsys.readouterr().out
    assert f"captured {rows} trace rows from the agents' landing zone: {rows} accepted" in out, out
    assert "[8/8] gated evaluation" in out and re.search(r"^(PROMOTED|STAGED|NOT PROMOTED)", out, re.M), out
