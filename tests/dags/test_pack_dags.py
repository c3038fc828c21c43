"""One set of DAGs per pack, from the scenarios folder at parse time, with every Param default
from the pack's resolved params: a pack added to the folder is trained on schedule, with no conf
and no code change, on the budget and reward function its params.yaml gives."""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT

WHEN = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)
PACK = "acme_credit"
BUDGET = 16_384  # PPO trains whole batches: a budget it can spend exactly


@pytest.fixture()
def added_pack(rlops_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the credit pack under another name in a scenarios folder of its own, with its
    own reward function choice, budget and cadence."""
    root = rlops_home / "scenarios"
    shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", root / PACK)
    doc = (root / PACK / "scenario.yaml").read_text().replace("name: credit_approval", f"name: {PACK}", 1)
    (root / PACK / "scenario.yaml").write_text(doc)
    params = yaml.safe_load((root / PACK / "params.yaml").read_text())
    params.update(
        reward_fn="v0", train={"total_timesteps": BUDGET}, dags={"retrain_full": "0 */2 * * *", "label_queue": None}
    )
    (root / PACK / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("RLOPS_SCENARIOS_DIR", str(root))
    return root


def _bag():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
    assert bag.import_errors == {}
    return bag


def test_an_added_pack_gets_its_scheduled_dags(added_pack: Path) -> None:
    bag = _bag()
    assert {d for d in bag.dag_ids if d.endswith(f"__{PACK}")} == {
        f"{k}__{PACK}"
        for k in (
            "trace_capture",
            "drift_monitor",
            "label_queue",
            "retrain_incremental",
            "retrain_full",
            "rollout",
            "promote",
        )
    }
    full = bag.dags[f"retrain_full__{PACK}"]
    assert full.schedule == "0 */2 * * *"  # the pack's own cadence
    assert bag.dags[f"label_queue__{PACK}"].schedule is None  # opted out of the schedule
    assert bag.dags[f"rollout__{PACK}"].schedule == "*/15 * * * *"  # the project's
    assert f"pack:{PACK}" in full.tags
    assert (full.params["scenario"], full.params["reward_fn"], full.params["timesteps"]) == (PACK, "v0", BUDGET)
    assert bag.dags[f"retrain_incremental__{PACK}"].params["timesteps"] == 200_000  # params.yaml's


def test_no_conf_full_retrain_trains_the_added_pack_on_its_params(airflow_db: str, added_pack: Path) -> None:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.registry.client import policy_model_name

    run = _bag().dags[f"retrain_full__{PACK}"].test(logical_date=WHEN)
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert str(run.state) == "success", states
    assert states["train_policy"] == "success", states
    ctx = StepContext.create(PACK, "20261130T0400")
    tags = ctx.tracker.model_version_tags(policy_model_name(PACK), "1")
    assert tags["reward_fn"] == "v0"
    assert BUDGET // 2 < int(tags["timesteps"]) <= BUDGET  # the pack's budget, not a DAG file's
    assert tags["run_key"] == "20261130T0400"  # the hour that ended at the logical date


def test_airflow_dags_test_of_a_built_in_pack_trains_that_pack(airflow_db: str, rlops_home: Path) -> None:
    """The operator's command line: `airflow dags test retrain_full__<pack>` with no conf."""
    import os

    params = yaml.safe_load((rlops_home / "params.yaml").read_text())
    params["train"]["total_timesteps"] = BUDGET
    (rlops_home / "params.yaml").write_text(yaml.safe_dump(params))
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", "retrain_full__loan_desk", "2026-11-30T05:00:00+00:00"],
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=rlops_home,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.registry.client import policy_model_name

    ctx = StepContext.create("loan_desk", "20261130T0400")
    tags = ctx.tracker.model_version_tags(policy_model_name("loan_desk"), "1")
    assert tags["reward_fn"] == "v1" and BUDGET // 2 < int(tags["timesteps"]) <= BUDGET
