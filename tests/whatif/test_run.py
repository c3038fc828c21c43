"""The what-if through the command line, on a copy of the credit pack: raising the compliance weight
lowers compliance breaches (deterministic seeds, a small training budget), and the what-if saved as
``reward_v2.py`` loads, passes the stress test, gets a registry version and differs from v1 in the
console's reward diff by its header and its changed constants only. Bad input: one line, exit 2,
nothing written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlops.cli import main
from rlops.common.config import load_params
from rlops.console.data import ProjectData
from rlops.console.registry_views import reward_diff
from rlops.pipeline_steps.stress.step import StressConfig, stress_reward_fn
from rlops.registry.client import Tracker
from rlops.sandbox.pack import load_pack

# Small enough to run in seconds, large enough for the direction to be far outside the intervals.
BUDGET = ["--episodes", "1500", "--timesteps", "98304"]


def whatif(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any] | None, str]:
    code = main(["reward", "whatif", *args, "--json"])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else None), out.err


def test_raising_compliance_lowers_breaches_and_saves_a_governed_version(
    rlops_home: Path, credit_copy: Path, tmp_tracking: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, r, err = whatif(["--scenario", str(credit_copy), "--set", "compliance=3", *BUDGET, "--save"], capsys)
    assert code == 0, err
    assert r is not None
    assert r["champion"].startswith("a policy trained under reward v1") and r["world"].startswith("'sandbox'")
    breaches = r["segments"]["overall"]["kpis"]["unlisted_rejection_rate"]["difference"]
    assert breaches["high"] < 0, breaches  # fewer rejections without a listed reason, beyond the interval
    direction = r["direction"]["compliance"]
    assert direction["ok"] is True and "unlisted_rejection_rate" in direction["improved"]
    assert set(r["segments"]) == {"overall", "low_credit_score", "young_applicants"}
    every = r["segments"]["overall"]["kpis"]
    assert {"completion_rate", "human_takeover_rate", "handling_steps", "approval_rate", "default_rate"} <= set(every)
    assert all(v["whatif"]["n"] > 0 for k, v in every.items() if k not in ("fraud_approved_rate",))
    assert r["decision_map"]["clusters"] and r["decision_map"]["states"] > 0

    # saved: reward_v2.py, the same source the what-if trained on
    saved = Path(r["saved_as"])
    assert saved == credit_copy / "reward_v2.py"
    pack = load_pack(credit_copy)
    v2 = pack.reward_fn("v2")
    assert v2.version == r["whatif_reward_fn_sha256"] and v2.weights_at(0)["compliance"] == 3.0
    assert v2.rule_refs == pack.reward_fn("v1").rule_refs
    assert stress_reward_fn(pack, v2, StressConfig(edge_states=1024, gaming_episodes=400)).passed
    version = Tracker(tmp_tracking, "credit_approval").register_reward_fn(
        "credit_approval", saved, v2.version, v2.rule_refs, "v2"
    )
    assert version == "1"
    params = load_params(overrides={"scenarios_dir": str(credit_copy.parent)})
    view = reward_diff(ProjectData(params), "credit_approval", "v1", "v2")
    changed = [x["text"] for x in view["lines"] if x["kind"] in ("add", "del")]
    assert [x for x in changed if not x.startswith("+#")] == [
        '-VERSION_LABEL = "v1"',
        '-WEIGHTS = {"compliance": 1.0, "risk": 1.0, "service": 1.0, "efficiency": 1.0}',
        '+VERSION_LABEL = "v2"',
        '+WEIGHTS = {"compliance": 3.0, "risk": 1.0, "service": 1.0, "efficiency": 1.0}',
    ] or _signal_entry_dropped(changed)
    assert view["refs_added"] == [] and view["refs_removed"] == []


def _signal_entry_dropped(changed: list[str]) -> bool:
    """With a signal-driven compliance weight, pinning it drops its SIGNAL_WEIGHTS entry too."""
    rest = [x for x in changed if not x.startswith("+#") and "VERSION_LABEL" not in x and "WEIGHTS = {" not in x]
    return all("SIGNAL_WEIGHTS" in x or "complaint_index" in x or x.strip() in ("-}", "+}") for x in rest)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "speed=1"], "has no objective 'speed'"),
        (["--set", "compliance=nan"], "finite number"),
        (["--set", "compliance=1e9"], r"must lie in \[0, 10\]"),
        (["--param", "LOW_SCORE_CAP_MULTIPLE=7"], r"declared range \[1, 5\]"),
        ([], "nothing to change"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    rlops_home: Path, credit_copy: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    before = sorted(p.name for p in credit_copy.iterdir())
    code, _, err = whatif(["--scenario", str(credit_copy), *args, "--save"], capsys)
    assert code == 2 and message in err.replace("\\[", "[") or __import__("re").search(message, err), err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert sorted(p.name for p in credit_copy.iterdir()) == before
    assert not (rlops_home / "rlops-data" / "whatif-baselines").exists()
