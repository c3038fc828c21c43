"""Command probes: commands that must not write where they should not, or say they succeeded when
they did not. ``train tune --write`` keeps tiny learning rates exact; ``simulate --workdir`` never
overwrites a project's params.yaml; ``profile --trace`` to a path rlops cannot write is an error
before any training; absurd numbers (``--duration nan``, ``--episodes-per-tick 1e12``, an event at
``at_hour: nan``) are refused at once instead of hanging; ``--scenario /`` is an error for every
command, never the default pack; a reward switch without a training in progress is refused, and
``train status --pid`` of a killed training does not say RUNNING. One test per probe."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, ids, run_probe


def cli_error(
    id: str,
    argv: list[str],
    mentions: tuple[str, ...] = (),
    setup: Any = None,
    after: Any = None,
    timeout_s: float = 60,
) -> IOProbe:
    """``argv`` ({tmp} replaced) must exit 2 with one line naming ``mentions``; ``after(tmp)`` then
    checks that nothing was damaged."""

    def run(tmp: Path) -> Verdict:
        if setup is not None:
            setup(tmp)
        verdict = expect_cli_error([a.replace("{tmp}", str(tmp)) for a in argv], 2, mentions)
        return verdict or (after(tmp) if after is not None else None)

    return IOProbe(f"cmd_{id}", run, timeout_s)


# --------------------------------------------------------------------------- train tune --write


def tuned(id: str, value: float) -> IOProbe:
    def run(tmp: Path) -> Verdict:
        import yaml

        from rlops.pipeline_steps.training.tune import write_params

        path = tmp / "params.yaml"
        path.write_text("ppo:\n  learning_rate: 0.0003  # the default\n")
        write_params(path, {"learning_rate": value})
        got = (yaml.safe_load(path.read_text()).get("ppo") or {}).get("learning_rate")
        if not isinstance(got, float) or not math.isclose(got, value, rel_tol=1e-5):
            return "lost", f"{value!r} written as {got!r}: {path.read_text()!r}"
        return None if "# the default" in path.read_text() else ("lost", "the comment was dropped")

    return IOProbe(f"tune_write_{id}", run)


TUNE_PROBES = [
    tuned(i, v)
    for i, v in (
        ("1e-7", 1e-7),
        ("3e-10", 3e-10),
        ("1.23456789e-4", 1.23456789e-4),
        ("2.5e-4", 2.5e-4),
        ("1e5", 1e5),
        ("0.1", 0.1),
        ("7e-21", 7e-21),
    )
]


def _tune_nan(tmp: Path) -> Verdict:
    from rlops.pipeline_steps.training.tune import write_params

    path = tmp / "params.yaml"
    path.write_text("ppo:\n  learning_rate: 0.0003\n")
    try:
        write_params(path, {"learning_rate": float("nan")})
    except ValueError:
        return None if "0.0003" in path.read_text() else ("lost", "the file was changed")
    return "accepted", f"NaN written: {path.read_text()!r}"


TUNE_PROBES.append(IOProbe("tune_write_nan_refused", _tune_nan))


# --------------------------------------------------------------------------- simulate

PROJECT_PARAMS = "scenario: mine\nstorage: {root: file:///precious}\n"


def project_params(tmp: Path) -> None:
    (tmp / "work").mkdir()
    (tmp / "work" / "params.yaml").write_text(PROJECT_PARAMS)


def params_kept(tmp: Path) -> Verdict:
    got = (tmp / "work" / "params.yaml").read_text()
    return None if got == PROJECT_PARAMS else ("lost", f"the project's params.yaml was overwritten: {got[:80]!r}")


def events_file(at: str) -> Any:
    def setup(tmp: Path) -> None:
        (tmp / "events.yaml").write_text(f"events:\n  - at_hour: {at}\n    kind: bad_candidate\n")

    return setup


SIMULATE = ["simulate", "--hours", "4", "--dry-run"]
SIMULATE_PROBES = [
    cli_error(
        "simulate_workdir_with_params",
        ["simulate", "--hours", "1", "--workdir", "{tmp}/work"],
        ("--workdir", "params.yaml"),
        project_params,
        params_kept,
    ),
    cli_error(
        "simulate_workdir_is_a_file",
        ["simulate", "--hours", "1", "--workdir", "{tmp}/file"],
        ("--workdir",),
        lambda tmp: (tmp / "file").write_text("x"),
    ),
    *(
        cli_error(f"simulate_episodes_per_tick_{v}", [*SIMULATE, "--episodes-per-tick", v], ("--episodes-per-tick",))
        for v in ("1e12", "1000000000000", "0", "-1", "1.5", "nan", "inf", "many", "100001")
    ),
    *(
        cli_error(f"simulate_late_outcome_{v}", [*SIMULATE, "--late-outcome", v], ("--late-outcome", "loan_outcome"))
        for v in ("nope", "", "LOAN_OUTCOME", "loan_outcome ", "reward_total")
    ),
    *(
        cli_error(
            f"simulate_outcome_delay_{v}",
            [*SIMULATE, "--late-outcome", "loan_outcome", "--outcome-delay-hours", v],
            ("--outcome-delay-hours",),
        )
        for v in ("0", "-1", "nan", "inf", "4", "1e9", "soon")
    ),
    *(
        cli_error(f"simulate_at_hour_{v}", [*SIMULATE, "--events", "{tmp}/events.yaml"], ("at_hour",), events_file(v))
        for v in ("nan", ".nan", "-1", "4", "1000", ".inf")
    ),
    # a port out of range is refused before anything binds (it used to hang, or exit 3)
    *(cli_error(f"console_port_{v}", ["console", "--port", v], ("--port",)) for v in ("99999", "-1", "0", "65536")),
]


# --------------------------------------------------------------------------- profile

PROFILE_PROBES = [
    *(
        cli_error(f"profile_duration_{v}", ["profile", "--duration", v, "--dry-run"], ("--duration",))
        for v in ("nan", "inf", "-inf", "0", "-5", "1e9")
    ),
    *(
        cli_error(f"profile_iterations_{v}", ["profile", "--iterations", v, "--dry-run"], ("--iterations",))
        for v in ("0", "-1", "51")
    ),
    cli_error(
        "profile_trace_in_proc",
        ["profile", "--duration", "1", "--trace", "/proc/rlops-no/trace.json", "--dry-run"],
        ("--trace",),
    ),
    cli_error(
        "profile_trace_in_sys", ["profile", "--duration", "1", "--trace", "/sys/trace.json", "--dry-run"], ("--trace",)
    ),
    cli_error(
        "profile_trace_is_a_folder",
        ["profile", "--duration", "1", "--trace", "{tmp}", "--dry-run"],
        ("--trace", "folder"),
    ),
    cli_error(
        "profile_trace_under_a_file",
        ["profile", "--duration", "1", "--trace", "{tmp}/f/trace.json", "--dry-run"],
        ("--trace",),
        lambda tmp: (tmp / "f").write_text("x"),
    ),
]


# --------------------------------------------------------------------------- --scenario that is no pack

COMMANDS = {
    "capture": ["capture", "--dry-run"],
    "replay": ["replay", "--trace-id", "t-1"],
    "audit": ["audit", "--dry-run"],
    "train_policy": ["train", "policy", "--dry-run"],
    "train_reward_model": ["train", "reward-model", "--dry-run"],
    "switch_reward": ["train", "switch-reward", "--to", "v0", "--dry-run"],
    "model_rollback": ["model", "rollback", "--dry-run"],
    "model_evaluate": ["model", "evaluate", "--candidate", "1", "--dry-run"],
    "labels_run": ["labels", "run", "--dry-run"],
    "drift_check": ["drift", "check", "--dry-run"],
    "calibrate": ["calibrate", "--dry-run"],
    "stress": ["stress", "--dry-run"],
    "model_promote": ["model", "promote", "--candidate", "1", "--dry-run"],
    "simulate": ["simulate", "--dry-run"],
    "profile": ["profile", "--dry-run"],
}
BAD_SCENARIOS = {"root": "/", "dot_dot": "..", "tmp_folder": "{tmp}", "blank": "  "}
SCENARIO_PROBES = [
    cli_error(f"scenario_{what}_{name}", [*argv, "--scenario", value], ("--scenario",))
    for name, argv in COMMANDS.items()
    for what, value in BAD_SCENARIOS.items()
    if not (what in ("dot_dot", "blank") and name not in ("capture", "model_rollback", "simulate"))
]


# --------------------------------------------------------------------------- training in progress


def _switch_without_training(tmp: Path) -> Verdict:
    verdict = expect_cli_error(
        ["train", "switch-reward", "--to", "v0", "--run-key", "20260105T1000"], 2, ("no training",)
    )
    left = list((tmp.parent.parent / "store").rglob("reward_fn.json")) if (tmp.parent.parent / "store").exists() else []
    return verdict or (None if not left else ("lost", f"a stale request was left: {left}"))


def _status_of_killed_run(tmp: Path) -> Verdict:
    import os
    import socket
    import subprocess
    import sys

    from mlflow import MlflowClient

    from rlops.registry import tags as T

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("credit_approval") or client.get_experiment(
        client.create_experiment("credit_approval")
    )
    run = client.create_run(
        exp.experiment_id,
        tags={T.STEP: T.TRAIN_POLICY, T.PID: str(gone.pid), T.HOST: socket.gethostname(), T.RUN_KEY: "20260105T1000"},
    )
    client.log_metric(run.info.run_id, "episodic_return", 1.0, step=1)
    rc, out, err = cli(["train", "status", "--pid", str(gone.pid), "--json"])
    if rc != 0:
        return "accepted", f"exit {rc}: {err.strip()[-200:]}"
    status = json.loads(out)["status"]
    return None if status != "RUNNING" else ("accepted", "a killed training reported RUNNING")


def _poller_ignores_stale(tmp: Path) -> Verdict:
    from rlops.common.config import REPO_ROOT
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.training.hot_reload import RewardSwitchPoller, control_uri
    from rlops.sandbox.pack import load_pack

    ctx = StepContext.create("credit_approval", "20260105T1000")
    ctx.storage.write_json(control_uri(ctx), {"reward_fn": "v0", "requested_at": "2026-01-01T00:00:00+00:00"})
    poller = RewardSwitchPoller(ctx, load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False))
    got = poller(1)
    return None if got is None else ("accepted", "a request made before the training switched it")


RUN_PROBES = [
    IOProbe("cmd_switch_reward_without_training", _switch_without_training),
    IOProbe("cmd_train_status_of_killed_run", _status_of_killed_run, 90),
    IOProbe("cmd_poller_ignores_stale_request", _poller_ignores_stale),
]

PROBES = [*TUNE_PROBES, *SIMULATE_PROBES, *PROFILE_PROBES, *SCENARIO_PROBES, *RUN_PROBES]


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_command_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))
