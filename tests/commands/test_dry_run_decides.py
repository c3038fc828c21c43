"""A command's ``--dry-run`` computes what the real run would decide and skips only the writes:
its ``--json`` carries the same decision fields (drifted fields and retrain, a promotion's verdict,
counts) as the real run on the same inputs, in a temporary project home."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import REPO_ROOT

SCENARIO = "credit_approval"
RUN_KEY = "20261130T0500"


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """``rlops <argv> --json`` in this process: its exit code (0, or 1 for a failed gate or stress
    test, 3 for drift; never 2, bad input) and its one JSON document."""
    from rlops.cli import main

    capsys.readouterr()
    rc = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert rc in (0, 1, 3) and out.strip(), f"rlops {' '.join(argv)} exited {rc}: {err[-2000:]}"
    doc: dict[str, Any] = json.loads(out)
    return rc, doc


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_drift_check_dry_run_reports_the_drift_the_real_run_finds(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Live traces of the run key's hour with a slowed service: the dry run names the drifted
    latency and calls for the retrain exactly as the real run does, and writes no report."""
    from rlops.pipeline_steps.drift.check import comparable_rows, window_uri
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / SCENARIO, check_liveness=False)
    ctx = StepContext.create(SCENARIO, RUN_KEY)
    live = comparable_rows(pack, rollout_traces(pack, random_policy(3), 300, seed=3, episode_prefix="live"))
    live["latency_ms"] = live["latency_ms"] * 4 + 50  # a slower service: latency drifts
    ctx.storage.write_parquet(f"{window_uri(ctx)}/part-0.parquet", live)
    argv = ["drift", "check", "--scenario", SCENARIO, "--run-key", RUN_KEY, "--episodes", "300"]
    before = files_under(rlops_home / "data")
    rc_dry, dry = run_json([*argv, "--dry-run"], capsys)
    assert files_under(rlops_home / "data") == before, "the dry run wrote to storage"
    rc_real, real = run_json(argv, capsys)
    assert rc_dry == rc_real == 0
    assert "latency_ms" in real["drifted_fields"] and real["retrain"] is True
    decision = ("drifted_fields", "anomaly", "outcome_drift", "outcome_onset", "outcome_drifted_cells", "retrain")
    assert {k: dry[k] for k in decision} == {k: real[k] for k in decision}
    assert dry["dry_run"] is True and dry["report_uri"] is None and real["report_uri"]


def simulated_capture(capsys: pytest.CaptureFixture[str]) -> None:
    """The run key's hour of simulated champion traffic, captured for real (the later steps' input)."""
    run_json(["capture", "--scenario", SCENARIO, "--run-key", RUN_KEY, "--simulate", "--episodes", "300"], capsys)


def two_windows(home: Path) -> list[str]:
    """A baseline and a slowed target parquet file for ``drift detect``."""
    from rlops.pipeline_steps.drift.check import comparable_rows
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / SCENARIO, check_liveness=False)
    base = comparable_rows(pack, rollout_traces(pack, random_policy(1), 200, seed=1, episode_prefix="b"))
    target = comparable_rows(pack, rollout_traces(pack, random_policy(2), 200, seed=2, episode_prefix="t"))
    target["latency_ms"] = target["latency_ms"] * 4 + 50
    paths = [home / "baseline.parquet", home / "target.parquet"]
    base.to_parquet(paths[0])
    target.to_parquet(paths[1])
    return ["--baseline", str(paths[0]), "--target", str(paths[1]), "--out", f"file://{home / 'detect'}"]


def registered_candidate() -> None:
    """A rule-like champion (v1) and a deliberately bad candidate (v2) in the registry."""
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.registry import CHAMPION
    from tests.policy_kit import NAME, approve_all_policy, cloned_rules_policy, credit_pack, register

    pack, ctx = credit_pack(), StepContext.create(SCENARIO, RUN_KEY)
    ctx.tracker.set_alias(NAME, CHAMPION, register(ctx, pack, cloned_rules_policy(pack)))
    register(ctx, pack, approve_all_policy(pack))


EVALUATE = {"evaluate": {"require_stress_test": False, "latency_p99_ratio": 1000.0, "episodes": 600}}
KEYED = ["--scenario", SCENARIO, "--run-key", RUN_KEY]
# (command line, what it needs first, the decision fields the two runs must share)
CASES = [
    pytest.param(
        ["drift", "detect", "--scenario", SCENARIO],
        "windows",
        ("drifted_fields", "summary", "fields"),
        id="drift-detect",
    ),
    pytest.param(
        ["capture", *KEYED, "--simulate", "--episodes", "300"],
        None,
        ("source", "rows_in", "rows_accepted", "rows_quarantined"),
        id="capture",
    ),
    pytest.param(
        ["calibrate", *KEYED],
        "capture",
        ("rows", "fields", "skipped", "rejected", "segments", "check", "rewards"),
        id="calibrate",
    ),
    pytest.param(["audit", *KEYED], "capture", ("clusters", "rows", "rows_skipped", "warnings"), id="audit"),
    pytest.param(
        ["labels", "run", *KEYED],
        "capture",
        ("rows_read", "rows_judged", "selection", "clusters_selected", "items", "inserted", "already_queued"),
        id="labels-run",
    ),
    pytest.param(["stress", *KEYED], None, ("passed", "verdict", "reasons", "warnings"), id="stress"),
    pytest.param(
        ["model", "evaluate", *KEYED, "--candidate", "2"],
        "registry",
        ("passed", "failed_gates", "gates", "champion_version"),
        id="model-evaluate",
        marks=pytest.mark.slow,  # ~75 s: two policies, two held-out evaluations
    ),
    pytest.param(
        ["model", "promote", *KEYED, "--candidate", "2"],
        "registry",
        ("passed", "failed_gates", "gates", "promoted", "action"),
        id="model-promote",
        marks=pytest.mark.slow,  # ~75 s: two policies, two held-out evaluations
    ),
]


@pytest.mark.parametrize(("argv", "needs", "decision"), CASES)
def test_a_dry_run_decides_what_the_real_run_does(
    rlops_home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needs: str | None, decision: tuple[str, ...]
) -> None:
    import yaml

    if needs == "registry":  # a loose latency gate and no stress test: the verdict is the returns'
        params = yaml.safe_load((rlops_home / "params.yaml").read_text())
        params["evaluate"].update(EVALUATE["evaluate"])
        (rlops_home / "params.yaml").write_text(yaml.safe_dump(params))
        registered_candidate()
    elif needs == "capture":
        simulated_capture(capsys)
    elif needs == "windows":
        argv = [*argv, *two_windows(rlops_home)]
    before = files_under(rlops_home / "data")
    rc_dry, dry = run_json([*argv, "--dry-run"], capsys)
    assert files_under(rlops_home / "data") == before, "the dry run wrote to storage"
    rc_real, real = run_json(argv, capsys)
    assert rc_dry == rc_real, f"the dry run exited {rc_dry}, the real run {rc_real}"
    missing = [k for k in decision if k not in dry or k not in real]
    assert not missing, f"decision fields missing from the dry run's or the real run's JSON: {missing}"
    assert verdicts(dry, decision) == verdicts(real, decision)


def verdicts(doc: dict[str, Any], decision: tuple[str, ...]) -> dict[str, Any]:
    """The decision fields of a result; a gate by its verdict (a latency gate's measured p99 is the
    machine's, not the decision's, and differs between two runs)."""
    out = {k: doc[k] for k in decision}
    if "gates" in out:
        out["gates"] = [(g["gate"], g["status"]) for g in out["gates"]]
    return out


@pytest.mark.parametrize(
    ("argv", "key"),
    [
        pytest.param(["capture", *KEYED, "--simulate", "--episodes", "100"], "fallbacks", id="capture-fallbacks"),
        pytest.param(["train", "reward-model", *KEYED], "model_version", id="train-reward-model"),
        pytest.param(["train", "tune", "--scenario", SCENARIO, "--trials", "2"], "best", id="train-tune"),
        pytest.param(["simulate", "--scenario", SCENARIO, "--hours", "2"], "metrics", id="simulate"),
        pytest.param(["profile", "--scenario", SCENARIO, "--duration", "1"], "report", id="profile"),
    ],
)
def test_a_dry_run_that_cannot_decide_says_so(
    rlops_home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], key: str
) -> None:
    """What only the writes (a training, a timeline, written partitions) can tell is reported as not
    computed, with the reason — never left out, nor a silent false or zero."""
    before = files_under(rlops_home / "data")
    rc, doc = run_json([*argv, "--dry-run"], capsys)
    assert rc == 0 and doc["dry_run"] is True
    assert isinstance(doc.get(key), str) and doc[key].startswith("not computed: "), doc.get(key)
    assert files_under(rlops_home / "data") == before


def test_switch_reward_dry_run_refuses_as_the_real_run_does(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No training of the run key is running: the real request is refused, so is the dry run's."""
    from rlops.cli import main

    argv = ["train", "switch-reward", *KEYED, "--to", "v0", "--json"]
    for extra in (["--dry-run"], []):
        capsys.readouterr()
        assert main([*argv, *extra]) == 2
        assert "no training" in capsys.readouterr().err


def test_train_policy_dry_run_decides_the_mode_and_the_reuse(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before the training the dry run plans it (nothing to reuse: version and return not computed);
    after it, the dry run finds the identical training and names its version, as the real rerun does."""
    argv = ["train", "policy", *KEYED, "--mode", "incremental", "--timesteps", "2048"]
    plan = ("mode", "timesteps_budget", "num_envs", "profile", "reward_fn", "reward_fn_sha256")
    _, dry = run_json([*argv, "--dry-run"], capsys)
    _, real = run_json(argv, capsys)
    assert {k: dry[k] for k in plan} == {k: real[k] for k in plan} and real["mode"] == "full"  # no champion
    assert dry["reused"] is False and real["reused"] is False
    assert dry["model_version"].startswith("not computed: ") and dry["mean_return"].startswith("not computed: ")
    _, dry_again = run_json([*argv, "--dry-run"], capsys)
    _, rerun = run_json(argv, capsys)
    assert dry_again["reused"] is rerun["reused"] is True
    assert dry_again["model_version"] == rerun["model_version"] == real["model_version"]


def test_model_rollback_dry_run_names_the_version_the_real_rollback_restores(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlops.pipeline_steps.infra.aliases import move_champion
    from rlops.pipeline_steps.infra.context import StepContext
    from tests.policy_kit import NAME, approve_all_policy, credit_pack, register

    pack, ctx = credit_pack(), StepContext.create(SCENARIO, RUN_KEY)
    for _ in range(2):
        move_champion(ctx.tracker, NAME, register(ctx, pack, approve_all_policy(pack)))
    rc_dry, dry = run_json(["model", "rollback", "--scenario", SCENARIO, "--dry-run"], capsys)
    assert ctx.tracker.get_alias(NAME, "champion") == "2"  # the dry run moved nothing
    rc_real, real = run_json(["model", "rollback", "--scenario", SCENARIO], capsys)
    assert rc_dry == rc_real == 0
    assert (dry["champion"], dry["would_restore"]) == (real["rolled_back_from"], real["champion"]) == ("2", "1")
