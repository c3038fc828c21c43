"""``make demo`` twice in a row: each run owns its run key, shows the whole loop, and exits 0
whether or not its candidate beats the champion the first run left (the gate table says why) —
no "internal error", no second set of step runs under one MLflow parent."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest
import yaml

DEMO = {"capture_episodes": 800, "reward_model_pairs": 400, "timesteps": 16_384, "torch_threads": 1}


def test_the_demo_runs_twice_in_a_row(rlops_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rlops import demo

    params = yaml.safe_load((rlops_home / "params.yaml").read_text())
    params["demo"] = DEMO
    (rlops_home / "params.yaml").write_text(yaml.safe_dump(params))

    outputs = []
    for _ in range(2):
        assert demo.run("credit_approval") == 0
        outputs.append(capsys.readouterr().out)
    keys = [re.search(r"run key (\S+),", out).group(1) for out in outputs]
    assert keys[0] != keys[1], keys
    for out in outputs:
        assert "internal error" not in out
        assert "[8/8] gated evaluation" in out and re.search(r"^(PROMOTED|STAGED|NOT PROMOTED)", out, re.M), out
    # The second run's candidate is gated against the champion the first one promoted (or the rules).
    assert re.search(r"gated evaluation vs (champion v\d+|rules)", outputs[1]), outputs[1]

    from rlops.pipeline_steps.infra.context import StepContext

    tracker = StepContext.create("credit_approval").tracker
    runs = tracker.client.search_runs([tracker.experiment_id], max_results=1000)
    per_parent = collections.Counter(
        (r.data.tags.get("mlflow.parentRunId"), r.info.run_name) for r in runs if r.data.tags.get("mlflow.parentRunId")
    )
    assert per_parent and max(per_parent.values()) == 1, [k for k, n in per_parent.items() if n > 1]
