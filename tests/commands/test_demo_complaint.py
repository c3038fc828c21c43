"""``rlops demo --scenario complaint_handling`` stages its candidate with every gate passing.

The demo runs as shipped — the project's and the pack's params, nothing loosened — in its own
process and project home. Its candidate must beat the rule engine on the same seeded live
episodes, in every segment, pass the stress test, and stay within the pack's operational budget
(supervisor hand-overs, handling time). The rule engine's explored traffic cannot judge a first
candidate that decides otherwise in most episodes, so the evidence holds it at the canary stage:
the alias ``challenger`` lands on v1 at 5 % of the traffic, whose live A/B decides the rest.
Run: ``pytest -m slow tests/commands/test_demo_complaint.py`` (about two minutes on a busy 2-core machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT

SCENARIO = "complaint_handling"

pytestmark = pytest.mark.slow


def test_the_complaint_demo_stages_v1_with_every_gate_passing(tmp_path: Path) -> None:
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["storage"]["root"] = f"file://{tmp_path / 'data'}"
    params["tracking"]["uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params["tracking"]["artifact_root"] = str(tmp_path / "mlartifacts")
    params["label_queue"]["db_url"] = f"sqlite:///{tmp_path / 'queue.db'}"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RLOPS_STORAGE_ROOT", "RLOPS_QUEUE_DB", "MLFLOW_TRACKING_URI", "RLOPS_ARTIFACT_ROOT")
    }
    env.update(RLOPS_PARAMS=str(tmp_path / "params.yaml"), RLOPS_HOME=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", f"from rlops import demo; raise SystemExit(demo.run({SCENARIO!r}))"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    log = out.stdout[-4000:] + out.stderr[-2000:]
    assert out.returncode == 0, log
    assert "stress test: pass" in out.stdout, log
    table = out.stdout.split("gated evaluation", 1)[1].split("STAGED", 1)[0].split("(what each row", 1)[0]
    rows = [ln.split() for ln in table.splitlines()[2:] if ln.strip()]
    assert rows and all(r[-1] in ("pass", "skipped") for r in rows), table
    assert {r[0] for r in rows if r[-1] == "pass"} >= {
        "mean_return",
        "completion_rate",
        "handling_ms",
        "human_takeover_rate",
        "segment:angry",
        "segment:severe",
        "segment:platinum",
        "stress_test",
    }, table
    assert "held at the canary stage: the off-policy evidence is insufficient" in out.stdout, log
    assert "champion: none (the rule engine serves)" in out.stdout, log

    from rlops.registry.client import Tracker

    tracker = Tracker.from_params(params, scenario=SCENARIO)
    assert tracker.get_alias(f"{SCENARIO}-policy", "challenger") == "1"
    assert tracker.model_version_tags(f"{SCENARIO}-policy", "1")["traffic_fraction"] == "0.05"
