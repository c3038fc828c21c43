"""``rlops import``: a decision log written outside rlops, with its own column names, action
values and event-time stamps, lands in the trace store through the capture contract, partitioned
by its own time: rows in = accepted + quarantined, a second import replaces the first, and a bad
mapping is one clear error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from rlops.common.config import REPO_ROOT
from rlops.common.errors import UserError
from rlops.pipeline_steps.capture.history import import_log
from rlops.pipeline_steps.capture.input_checks import CaptureRejected
from rlops.pipeline_steps.capture.request import ImportRequest
from rlops.pipeline_steps.infra.context import StepContext

WEEK_START = datetime(2026, 10, 5, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _env(tmp_tracking: str, tmp_storage_root: str) -> None:
    torch.set_num_threads(1)


def _foreign_offer_log(n: int) -> tuple[pd.DataFrame, list[str]]:
    """A week of a recommender's one-step log as another team writes it: its own column names,
    items as integers, the logging policy's propensity, clicks, ISO timestamps, a column of its own."""
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "offer_selection", check_liveness=False)
    df = rollout_traces(pack, random_policy(3), n, seed=11, profile="live", source="live")
    actions = list(pack.scenario.action_names)
    rng = np.random.default_rng(0)
    seconds = np.sort(rng.uniform(0, 7 * 24 * 3600, n))
    log = pd.DataFrame(
        {
            "visit": [f"v{i}" for i in range(n)],
            "shown_at": [(WEEK_START + timedelta(seconds=float(s))).isoformat() for s in seconds],
            "item": df["action"].map(actions.index).to_numpy(),
            "pscore": np.exp(df["logp"].to_numpy()),
            "click": df["reward_total"].to_numpy(),
            "campaign": "autumn",
        }
    )
    for col in [c for c in df.columns if c.startswith("state.")]:
        log[col.removeprefix("state.")] = df[col].to_numpy()
    return log, actions


def _ctx(scenario: str, dry_run: bool = False) -> StepContext:
    return StepContext.create(scenario, "20261005T0000", dry_run=dry_run)


def test_a_week_of_a_one_step_log_with_80_actions_imports_whole(tmp_path: Path) -> None:
    log, actions = _foreign_offer_log(3000)
    path = tmp_path / "recsys.parquet"
    log.to_parquet(path)
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(
        yaml.safe_dump(
            {
                "columns": {"episode_id": "visit", "ts": "shown_at", "action": "item", "propensity": "pscore"},
                "actions": {str(i): a for i, a in enumerate(actions)},
            }
        )
    )
    request = ImportRequest(str(path), columns="reward_total=click", mapping=str(mapping), policy_version="recsys-2026")
    ctx = _ctx("offer_selection")
    out = import_log(ctx, request)
    assert (out.rows_in, out.rows_accepted, out.rows_quarantined) == (3000, 3000, 0)
    assert len(out.partitions) >= 7 * 24 - 2  # by event time: an hour partition per hour of the week
    assert any("one-step episode" in w for w in out.warnings)

    stored = ctx.traces.read("offer_selection", (WEEK_START, WEEK_START + timedelta(days=8)))
    assert len(stored) == 3000 and set(stored["policy_version"]) == {"recsys-2026"}
    row = stored.set_index("episode_id").loc["v7"]
    assert row["action"] == actions[int(log.loc[7, "item"])]
    assert float(np.exp(row["logp"])) == pytest.approx(float(log.loc[7, "pscore"]))
    assert float(row["reward_total"]) == float(log.loc[7, "click"]) and bool(row["done"])
    assert json.loads(row["extra"])["campaign"] == "autumn"

    again = import_log(ctx, request)  # the same file again: replaces, never doubles
    assert again.rows_accepted == 3000
    assert len(ctx.traces.read("offer_selection", (WEEK_START, WEEK_START + timedelta(days=8)))) == 3000


def test_a_multi_step_credit_log_imports_with_its_episodes_ends_found(tmp_path: Path) -> None:
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    df = rollout_traces(pack, rule_policy, 200, seed=2, profile="live", source="live", start_ts=WEEK_START)
    log = df.rename(columns={"episode_id": "application", "step": "turn", "ts": "decided_at"})
    log = log.drop(columns=["trace_id", "scenario", "source", "done", "policy_version", "logp"])
    path = tmp_path / "desk.csv"
    log.to_csv(path, index=False)
    out = import_log(
        _ctx("credit_approval"),
        ImportRequest(
            str(path),
            columns="episode_id=application,step=turn,ts=decided_at",
            policy_version="loan-desk-rules",
            deterministic=True,
        ),
    )
    assert (out.rows_in, out.rows_accepted, out.rows_quarantined) == (len(df), len(df), 0)
    stored = _ctx("credit_approval").traces.read("credit_approval", (WEEK_START, WEEK_START + timedelta(days=1)))
    ends = stored.groupby("episode_id")["done"].sum()
    assert len(ends) == 200 and (ends == 1).all()
    assert (stored["logp"] == 0).all()


def test_bad_rows_are_quarantined_and_counted(tmp_path: Path) -> None:
    log, actions = _foreign_offer_log(200)
    log.loc[:9, "item"] = 999  # an item the pack does not have
    log.loc[10:14, "shown_at"] = "yesterday"  # no readable time
    path = tmp_path / "recsys.jsonl"
    log.to_json(path, orient="records", lines=True)
    mapping = {"columns": {"episode_id": "visit", "ts": "shown_at", "action": "item"}, "actions": {}}
    mapping["actions"] = {str(i): a for i, a in enumerate(actions)}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(mapping))
    out = import_log(
        _ctx("offer_selection"),
        ImportRequest(str(path), mapping=str(tmp_path / "m.yaml"), policy_version="recsys"),
    )
    assert (out.rows_in, out.rows_accepted, out.rows_quarantined) == (200, 185, 15)
    assert any("propensity" in w for w in out.warnings)


def test_nothing_accepted_fails_and_a_bad_mapping_is_one_error(tmp_path: Path) -> None:
    log, _ = _foreign_offer_log(50)
    path = tmp_path / "recsys.parquet"
    log.to_parquet(path)
    with pytest.raises(UserError, match="columns the log does not have: \\['session'\\]"):
        import_log(_ctx("offer_selection"), ImportRequest(str(path), columns="episode_id=session"))
    with pytest.raises(UserError, match="which policy served these decisions"):
        import_log(_ctx("offer_selection"), ImportRequest(str(path), columns="episode_id=visit,ts=shown_at"))
    with pytest.raises(UserError, match="expected a file ending in"):
        import_log(_ctx("offer_selection"), ImportRequest(str(tmp_path / "log.xlsx"), policy_version="p"))
    # items as integers without an `actions:` mapping: no row names a pack action
    with pytest.raises(CaptureRejected) as err:
        import_log(
            _ctx("offer_selection"),
            ImportRequest(str(path), columns="episode_id=visit,ts=shown_at,action=item", policy_version="p"),
        )
    assert err.value.summary is not None and err.value.summary.rows_quarantined == 50


def test_the_command_imports_and_says_what_it_filled_in(tmp_path: Path, rlops_home: Path) -> None:
    log, actions = _foreign_offer_log(100)
    log["item"] = [actions[i] for i in log["item"]]
    path = tmp_path / "recsys.csv"
    log.to_csv(path, index=False)
    cmd = [
        sys.executable,
        "-m",
        "rlops.cli",
        "import",
        "--scenario",
        "offer_selection",
        "--path",
        str(path),
        "--columns",
        "episode_id=visit,ts=shown_at,action=item,propensity=pscore,reward_total=click",
        "--policy-version",
        "recsys",
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), timeout=300, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["rows_in"], doc["rows_accepted"], doc["rows_quarantined"]) == (100, 100, 0)
    assert "one-step episode" in out.stderr
    bad = subprocess.run(
        [*cmd[:8], "--columns", "episode_id=nope", "--policy-version", "p"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert bad.returncode == 2 and "nope" in bad.stderr and "Traceback" not in bad.stderr


def test_a_log_on_s3_imports_as_a_local_one(tmp_path: Path, moto_bucket: str) -> None:
    import boto3

    log, actions = _foreign_offer_log(120)
    log["item"] = [actions[i] for i in log["item"]]
    log.to_parquet(tmp_path / "recsys.parquet")
    boto3.client("s3", endpoint_url=os.environ["RLOPS_S3_ENDPOINT_URL"]).upload_file(
        str(tmp_path / "recsys.parquet"), "rlops-test", "logs/recsys.parquet"
    )
    out = import_log(
        _ctx("offer_selection"),
        ImportRequest(
            f"{moto_bucket}/logs/recsys.parquet",
            columns="episode_id=visit,ts=shown_at,action=item,propensity=pscore",
            policy_version="recsys",
        ),
    )
    assert (out.rows_in, out.rows_accepted) == (120, 120)
