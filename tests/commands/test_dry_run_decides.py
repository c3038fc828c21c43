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
    from rlops.registry.client import CHAMPION
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
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.registry.aliases import move_champion
    from tests.policy_kit import NAME, approve_all_policy, credit_pack, register

    pack, ctx = credit_pack(), StepContext.create(SCENARIO, RUN_KEY)
    for _ in range(2):
        move_champion(ctx.tracker, NAME, register(ctx, pack, approve_all_policy(pack)))
    rc_dry, dry = run_json(["model", "rollback", "--scenario", SCENARIO, "--dry-run"], capsys)
    assert ctx.tracker.get_alias(NAME, "champion") == "2"  # the dry run moved nothing
    rc_real, real = run_json(["model", "rollback", "--scenario", SCENARIO], capsys)
    assert rc_dry == rc_real == 0
    assert (dry["champion"], dry["would_restore"]) == (real["rolled_back_from"], real["champion"]) == ("2", "1")


# --------------------------------------------------------------------------- the other dry runs
PACK_DIR = str(REPO_ROOT / "scenarios" / SCENARIO)


@pytest.mark.parametrize(
    ("argv", "decision"),
    [
        pytest.param(
            ["env", "validate", "--scenario", PACK_DIR],
            ("pack", "fields", "actions", "profiles", "reward_functions", "rules"),
            id="env-validate",
        ),
        pytest.param(
            ["env", "describe", "--scenario", PACK_DIR],
            ("name", "state", "actions", "profiles", "reward_functions", "observation_dim"),
            id="env-describe",
        ),
    ],
)
def test_read_only_commands_decide_the_same_dry(
    rlops_home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], decision: tuple[str, ...]
) -> None:
    """Commands that write nothing anyway: the dry run's document is the real run's."""
    rc_dry, dry = run_json([*argv, "--dry-run"], capsys)
    rc_real, real = run_json(argv, capsys)
    assert rc_dry == rc_real == 0
    assert {k: dry[k] for k in decision} == {k: real[k] for k in decision}


def test_env_rollout_dry_run_rolls_out_what_the_real_run_writes(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = rlops_home / "rollout" / "traces.parquet"
    argv = ["env", "rollout", "--scenario", PACK_DIR, "--episodes", "20", "--seed", "4", "--out", str(out)]
    rc_dry, dry = run_json([*argv, "--dry-run"], capsys)
    assert not out.exists() and not out.parent.exists(), "the dry run wrote or created its output"
    rc_real, real = run_json(argv, capsys)
    decision = ("rows", "episodes", "policy", "profile", "reward_fn", "out")
    assert rc_dry == rc_real == 0 and out.is_file()
    assert {k: dry[k] for k in decision} == {k: real[k] for k in decision}
    assert dry["dry_run"] is True and real["dry_run"] is False


def test_replay_dry_run_shows_the_path_the_real_run_shows(rlops_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pandas as pd

    simulated_capture(capsys)
    parts = [p for p in (rlops_home / "data").rglob("*.parquet") if "quarantine" not in p.parts]
    trace = str(pd.read_parquet(parts[0], columns=["trace_id"])["trace_id"].iloc[3])
    argv = ["replay", *KEYED, "--trace-id", trace]
    before = files_under(rlops_home / "data")
    rc_dry, dry = run_json([*argv, "--dry-run"], capsys)
    assert files_under(rlops_home / "data") == before
    rc_real, real = run_json(argv, capsys)
    assert rc_dry == rc_real == 0
    assert {k: v for k, v in dry.items() if k != "dry_run"} == {k: v for k, v in real.items() if k != "dry_run"}


def test_train_status_dry_run_reports_the_table_and_writes_no_csv(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A training's metric history: the dry run's table and plateau flag are the real run's; only
    the CSV is not written."""
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create(SCENARIO, RUN_KEY)
    with ctx.tracker.start_run("train · probe") as run:
        for i, ret in enumerate([0.1, 0.4, 0.5, 0.5, 0.49, 0.5]):
            run.log_metrics({"episodic_return": ret, "entropy": 1.0 - i / 10}, step=i)
    csv = rlops_home / "status.csv"
    argv = ["train", "status", "--scenario", SCENARIO, run.run_id, "--csv", str(csv)]
    rc_dry, dry = run_json([*argv, "--dry-run"], capsys)
    assert not csv.exists(), "the dry run wrote the CSV"
    rc_real, real = run_json(argv, capsys)
    assert rc_dry == rc_real == 0 and csv.is_file()
    decision = ("run_id", "status", "iterations", "columns", "rows", "plateau", "iterations_without_improvement")
    assert {k: dry[k] for k in decision} == {k: real[k] for k in decision}
    assert dry["iterations"] == 6


def queued(rlops_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A captured hour served by a learned policy (version 7) that was unsure of every decision,
    and its items in the label queue (the export's input)."""
    import numpy as np
    import pandas as pd

    simulated_capture(capsys)
    for part in (rlops_home / "data").rglob("*.parquet"):
        if "quarantine" in part.parts:
            continue
        df = pd.read_parquet(part)
        df["policy_version"] = "7"
        df["fallback"], df["fallback_reason"] = False, None  # the simulated rule engine's rows are fallbacks
        df["entropy"] = 0.9 * np.log(df["action_mask"].str.count("1").clip(lower=2))
        df.to_parquet(part, index=False)
    _, res = run_json(["labels", "run", *KEYED], capsys)
    assert res["inserted"] > 0, res


@pytest.mark.slow  # a capture, a queue run and an export first (the step-level test runs by default)
def test_labels_export_dry_run_names_the_tasks_the_real_export_writes(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queued(rlops_home, capsys)
    out = f"file://{rlops_home / 'ls' / 'tasks.json'}"
    argv = ["labels", "export", *KEYED, "--out", out]
    rc_dry, dry = run_json([*argv, "--dry-run"], capsys)
    assert not (rlops_home / "ls").exists(), "the dry run wrote the tasks"
    rc_real, real = run_json(argv, capsys)
    assert rc_dry == rc_real == 0
    assert dry["tasks"] == real["tasks"] > 0


@pytest.mark.slow  # a capture, a queue run and an export first (the step-level test runs by default)
def test_labels_import_dry_run_counts_what_the_real_import_ingests(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every exported task annotated (the first with an action its state does not allow): the dry
    import's counts are the real import's, and it stores no label."""
    from rlops.pipeline_steps.labels.store import LabelStore

    queued(rlops_home, capsys)
    path = rlops_home / "tasks.json"
    run_json(["labels", "export", *KEYED, "--out", f"file://{path}"], capsys)
    tasks = json.loads(path.read_text())
    for i, t in enumerate(tasks):
        choice = "no_such_action" if i == 0 else t["data"]["candidate_actions"][0]
        result = [{"from_name": "action", "to_name": "state", "type": "choices", "value": {"choices": [choice]}}]
        t["annotations"] = [
            {"id": 1, "completed_by": {"id": 3}, "created_at": "2026-11-30T07:00:00Z", "result": result}
        ]
    path.write_text(json.dumps(tasks))
    store = LabelStore(f"sqlite:///{rlops_home / 'queue.db'}")
    before = store.counts(SCENARIO)
    rc_dry, dry = run_json(["labels", "import", *KEYED, str(path), "--dry-run"], capsys)
    assert store.counts(SCENARIO) == before, "the dry run stored labels"
    rc_real, real = run_json(["labels", "import", *KEYED, str(path)], capsys)
    counts = ("tasks_in", "labels", "ingested", "rejected", "not_annotated", "conflicts", "stale")
    assert rc_dry == rc_real == 0 and real["ingested"] == len(tasks) - 1 and len(real["rejected"]) == 1
    assert {k: dry[k] for k in counts} == {k: real[k] for k in counts}


@pytest.mark.slow  # a reward-model training first (~1 min on two cores)
def test_train_relabel_dry_run_scores_what_the_real_run_writes(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    simulated_capture(capsys)
    run_json(["train", "reward-model", *KEYED], capsys)
    argv = ["train", "relabel", *KEYED]
    before = files_under(rlops_home / "data")
    rc_dry, dry = run_json([*argv, "--dry-run"], capsys)
    assert files_under(rlops_home / "data") == before, "the dry run wrote labels"
    rc_real, real = run_json(argv, capsys)
    decision = ("rows_in", "rows_out", "reward_model_version", "mean_score", "labels_uri")
    assert rc_dry == rc_real == 0 and real["rows_out"] > 0
    assert {k: dry[k] for k in decision} == {k: real[k] for k in decision}


@pytest.mark.parametrize("value", ["0.3", "3"], ids=["in-range", "out-of-range"])
def test_signal_set_dry_run_decides_what_the_real_set_does(
    rlops_home: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """The dry run accepts or refuses the offer as the real set does, and names the value it would
    put in force; only the real set records it."""
    from rlops.cli import main

    def offer(*extra: str) -> tuple[int, dict[str, Any] | None]:
        capsys.readouterr()
        rc = main(["signal", "set", "complaint_index", value, "--json", *extra])
        out = capsys.readouterr().out
        return rc, (json.loads(out) if out.strip() else None)

    def in_force() -> float:
        _, doc = run_json(["signal", "show", "complaint_index"], capsys)
        return float(doc["signals"][0]["value"])

    before = in_force()
    rc_dry, dry = offer("--dry-run")
    assert in_force() == before, "the dry run put the value in force"
    rc_real, real = offer()
    assert rc_dry == rc_real
    if dry is None or real is None:  # refused: one error line, no document
        assert rc_real == 2 and dry is real is None and in_force() == before
        return
    decision = (dry["offer"]["accepted"], dry["offer"]["value"], dry["in_force"]["value"], dry["in_force"]["status"])
    assert decision == (
        real["offer"]["accepted"],
        real["offer"]["value"],
        real["in_force"]["value"],
        real["in_force"]["status"],
    )
    assert in_force() == float(value)


@pytest.mark.slow  # two small trainings per run (the what-if and its baseline)
def test_reward_whatif_dry_run_decides_what_the_real_run_saves(
    rlops_home: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """On a copy of the pack: the dry run computes the same change, weights and figures as the real
    run with ``--save``, names the file the real run writes, and writes none itself."""
    import shutil

    pack = tmp_path / "pack" / SCENARIO
    shutil.copytree(REPO_ROOT / "scenarios" / SCENARIO, pack)
    argv = ["reward", "whatif", "--scenario", str(pack), "--set", "compliance=2.0"]
    argv += ["--timesteps", "2048", "--episodes", "64", "--seed", "3", "--threads", "1", "--save"]
    before = sorted(p.name for p in pack.iterdir())
    rc_dry, dry = run_json([*argv, "--dry-run"], capsys)
    assert sorted(p.name for p in pack.iterdir()) == before, "the dry run wrote into the pack"
    rc_real, real = run_json(argv, capsys)
    decision = ("change", "weights", "whatif_reward_fn", "whatif_reward_fn_sha256", "whatif_weights", "segments")
    assert rc_dry == rc_real == 0
    assert {k: dry[k] for k in decision} == {k: real[k] for k in decision}
    assert dry["saved_as"] is None and dry["would_save_as"] == real["saved_as"] and Path(real["saved_as"]).is_file()
