"""Argument probes through ``rlops``: every bad value of capture, training, drift check and evaluation
arguments is refused before any work with exit code 2 and one line naming the argument and what
was expected (never silently replaced by a default, never a traceback). One test per probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlops.common.arguments import MAX_EPISODES, count, fraction

from .io_harness import IOProbe, Verdict, check, expect_cli_error, ids, run_probe


def arg(id: str, argv: list[str], mentions: tuple[str, ...]) -> IOProbe:
    def run(tmp: Path) -> Verdict:
        return expect_cli_error(argv, 2, mentions)

    return IOProbe(f"arg_{id}", run)


CAPTURE = ["capture", "--simulate", "--run-key", "20260105T1000", "--dry-run"]

SAMPLE_RATES = ["7", "0", "-0.1", "1.0000001", "nan", "inf", "-inf", "1e309"]
EPISODES = ["0", "-1", "-1000", str(MAX_EPISODES + 1), str(10**30)]
RUN_KEYS = [
    "..",
    "../..",
    "../../etc/passwd",
    "20261399T0000",
    "20261130T2500",
    "20261130T0500-0m",
    "20261130T0500-99999m",
    "20261130T0500/..",
    "2026-11-30",
    "now",
    "20261130T0500-15",
    " .. ",
    "20261130T0500 ; rm -rf /",
    "20261130t0500",
]

PROBES = [
    *(
        arg(f"capture_sample_rate_{v}", [*CAPTURE, f"--sample-rate={v}"], ("--sample-rate", "(0, 1]"))
        for v in SAMPLE_RATES
    ),
    arg("capture_sample_rate_text", [*CAPTURE, "--sample-rate", "half"], ("--sample-rate",)),
    *(arg(f"capture_episodes_{v[:8]}", [*CAPTURE, f"--episodes={v}"], ("--episodes", "at least 1")) for v in EPISODES),
    arg("capture_episodes_fraction", [*CAPTURE, "--episodes", "1.5"], ("--episodes",)),
    *(
        arg(f"capture_run_key_{i}", ["capture", "--dry-run", "--run-key", k], ("run key",))
        for i, k in enumerate(RUN_KEYS)
    ),
    *(
        arg(f"train_run_key_{i}", ["train", "policy", "--dry-run", "--run-key", k], ("run key",))
        for i, k in enumerate(RUN_KEYS[:4])
    ),
    arg("train_timesteps_0", ["train", "policy", "--dry-run", "--timesteps", "0"], ("--timesteps",)),
    arg("train_timesteps_negative", ["train", "policy", "--dry-run", "--timesteps=-100"], ("--timesteps",)),
    arg(
        "train_timesteps_huge", ["train", "policy", "--dry-run", "--timesteps", str(10**14)], ("--timesteps", "at most")
    ),
    arg("train_mode_unknown", ["train", "policy", "--dry-run", "--mode", "partial"], ("--mode",)),
    arg("reward_model_pairs_0", ["train", "reward-model", "--dry-run", "--pairs", "0"], ("--pairs", "at least 1")),
    arg("reward_model_pairs_negative", ["train", "reward-model", "--dry-run", "--pairs=-2"], ("--pairs",)),
    arg(
        "evaluate_episodes_0",
        ["model", "evaluate", "--candidate", "1", "--episodes", "0"],
        ("--episodes", "at least 1"),
    ),
    arg("evaluate_episodes_negative", ["model", "evaluate", "--candidate", "1", "--episodes=-4"], ("--episodes",)),
    arg("promote_episodes_0", ["model", "promote", "--candidate", "1", "--episodes", "0"], ("--episodes",)),
    arg(
        "drift_check_episodes_0",
        ["drift", "check", "--dry-run", "--run-key", "20260105T1000", "--episodes", "0"],
        ("--episodes", "at least 1"),
    ),
    arg("capture_profile_unknown", [*CAPTURE, "--profile", "no_such_profile"], ("no_such_profile",)),
]


def _validators(tmp: Path) -> Verdict:
    """The validators themselves, on values argparse would never pass on (bools, text, None)."""
    from rlops.common.errors import UserError

    for bad in (True, None, "x", 0, 1.5, float("nan"), [1]):
        try:
            count("--n", bad)
        except UserError:
            continue
        return "accepted", f"count accepted {bad!r}"
    for bad in (True, None, "x", 0, 1.01, float("inf"), -0.0):
        try:
            fraction("--f", bad)
        except UserError:
            continue
        return "accepted", f"fraction accepted {bad!r}"
    return None if (count("--n", "3"), fraction("--f", "1")) == (3, 1.0) else ("lost", "valid values refused")


PROBES.append(IOProbe("validators_direct", _validators))


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_argument_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))
