"""A pack inferred by ``rlops init`` from the credit pack's live traces passes ``rlops env validate``
and ``rlops stress``, and ``rlops demo --scenario demo_pack`` promotes a policy on it: the whole loop
runs on the generated pack as written, in its own process and project home, nothing loosened.
Run: ``pytest -m slow tests/pack_init/test_init_demo.py`` (about five minutes on a busy 2-core machine).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT

pytestmark = pytest.mark.slow


def _rlops(args: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlops.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_init_from_live_traces_validates_stresses_and_the_demo_promotes(
    credit_live_traces: Path, tmp_path: Path
) -> None:
    scenarios = tmp_path / "scenarios"
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params["scenarios_dir"] = str(scenarios)
    params["storage"]["root"] = f"file://{tmp_path / 'data'}"
    params["tracking"]["uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params["tracking"]["artifact_root"] = str(tmp_path / "mlartifacts")
    params["label_queue"]["db_url"] = f"sqlite:///{tmp_path / 'queue.db'}"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "RLOPS_STORAGE_ROOT",
            "RLOPS_QUEUE_DB",
            "MLFLOW_TRACKING_URI",
            "RLOPS_ARTIFACT_ROOT",
            "RLOPS_SCENARIOS_DIR",
        )
    }
    env.update(RLOPS_PARAMS=str(tmp_path / "params.yaml"), RLOPS_HOME=str(tmp_path))

    out = _rlops(["init", "demo_pack", "--from-traces", str(credit_live_traces)], env, 300)
    assert out.returncode == 0, out.stderr
    assert (scenarios / "demo_pack" / "scenario.yaml").is_file()
    out = _rlops(["env", "validate", "--scenario", "demo_pack"], env, 300)
    assert out.returncode == 0 and out.stdout.startswith("ok: demo_pack"), out.stdout + out.stderr
    out = _rlops(["stress", "--scenario", "demo_pack"], env, 600)
    assert out.returncode == 0 and "stress test PASS" in out.stdout, out.stdout + out.stderr

    out = subprocess.run(
        [sys.executable, "-c", "from rlops import demo; raise SystemExit(demo.run('demo_pack'))"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    log = out.stdout[-4000:] + out.stderr[-2000:]
    assert out.returncode == 0, log
    assert "stress test: pass" in out.stdout, log
    table = out.stdout.split("gated evaluation", 1)[1].split("PROMOTED", 1)[0].split("(what each row", 1)[0]
    rows = [ln.split() for ln in table.splitlines()[2:] if ln.strip()]
    assert rows and all(r[-1] in ("pass", "skipped") for r in rows), table
    assert {r[0] for r in rows if r[-1] == "pass"} >= {"mean_return", "completion_rate", "stress_test"}, table
    assert re.search(r"champion: demo_pack-policy v1\b", out.stdout), log
