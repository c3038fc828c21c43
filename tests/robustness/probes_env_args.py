"""Bad arguments of ``rlops env validate | describe | rollout``: each is refused before any work,
with exit code 2 and one line naming the argument and what was expected; a failed rollout never
damages an existing output file."""

from __future__ import annotations

from pathlib import Path

from .harness import Probe
from .packs import SCENARIO, pack_with, reward_returning

CREDIT = "scenarios/credit_approval"
PACK = "{tmp}/pack"
OLD = '{"kept": true}\n'


def rollout(
    id: str,
    *args: str,
    mentions: tuple[str, ...] = (),
    pack: str = PACK,
    setup: object = pack_with(),
    check: object = None,
) -> Probe:
    argv = ("env", "rollout", "--scenario", pack, *args)
    if "--out" not in args:
        argv += ("--out", "{tmp}/out.jsonl")
    return Probe(f"args_{id}", argv, setup, mentions, check=check)  # type: ignore[arg-type]


def existing_out(tmp: Path) -> None:
    pack_with()(tmp)
    (tmp / "out.jsonl").write_text(OLD)


def out_kept(tmp: Path) -> str | None:
    path = tmp / "out.jsonl"
    if not path.exists():
        return "the previous output file was deleted"
    return None if path.read_text() == OLD else "the previous output file was overwritten or truncated"


def no_out(tmp: Path) -> str | None:
    left = [p.name for p in tmp.iterdir() if p.name.startswith(("out", ".out"))]
    return f"a failed rollout left {left}" if left else None


def broken_reward_with_out(tmp: Path) -> None:
    reward_returning("1 / 0")(tmp)
    (tmp / "out.jsonl").write_text(OLD)


def out_folder(tmp: Path) -> None:
    pack_with()(tmp)
    (tmp / "out.jsonl").mkdir()


def long_horizon(tmp: Path) -> None:
    pack_with(scenario=SCENARIO.replace("horizon: 5", "horizon: 1000"))(tmp)


def file_not_folder(tmp: Path) -> None:
    (tmp / "pack.txt").write_text("not a pack\n")


PROBES: list[Probe] = [
    # ---- control: a small valid rollout writes its file
    Probe(
        "args_rollout_ok",
        ("env", "rollout", "--scenario", PACK, "--episodes", "3", "--out", "{tmp}/out.jsonl"),
        pack_with(),
        expect_ok=True,
        check=lambda tmp: (
            None if (tmp / "out.jsonl").is_file() and (tmp / "out.jsonl").stat().st_size else "no trace rows written"
        ),
    ),
    # ---- --episodes
    rollout("episodes_zero", "--episodes", "0", mentions=("--episodes", "expected"), check=no_out),
    rollout("episodes_negative", "--episodes", "-5", mentions=("--episodes", "expected")),
    rollout("episodes_float_notation", "--episodes", "1e11", mentions=("--episodes", "'1e11'", "whole number")),
    rollout("episodes_1e11_digits", "--episodes", "100000000000", mentions=("--episodes", "expected")),
    rollout("episodes_huge", "--episodes", "9" * 5000, mentions=("--episodes",)),
    rollout("episodes_word", "--episodes", "many", mentions=("--episodes", "'many'")),
    rollout("episodes_empty", "--episodes", "", mentions=("--episodes",)),
    rollout("episodes_nan", "--episodes", "nan", mentions=("--episodes",)),
    rollout(
        "rows_over_limit", "--episodes", "10000", mentions=("--episodes", "rows"), setup=long_horizon, check=no_out
    ),
    # ---- --seed
    rollout("seed_negative", "--seed", "-1", mentions=("--seed",)),
    rollout("seed_huge", "--seed", str(2**70), mentions=("--seed",)),
    rollout("seed_word", "--seed", "abc", mentions=("--seed",)),
    # ---- --out: found bad before the rollout runs; an existing file survives a failure
    rollout("out_unwritable", "--out", "/proc/rlops-cannot-write/out.jsonl", mentions=("--out", "cannot write")),
    rollout("out_is_a_folder", mentions=("--out", "folder"), setup=out_folder),
    rollout("out_wrong_suffix", "--out", "{tmp}/out.csv", mentions=("--out", ".jsonl or .parquet"), check=no_out),
    rollout(
        "out_kept_on_bad_profile",
        "--profile",
        "nope",
        mentions=("--profile", "nope"),
        setup=existing_out,
        check=out_kept,
    ),
    rollout(
        "out_kept_on_bad_reward_fn",
        "--reward-fn",
        "v9",
        mentions=("reward function", "v9"),
        setup=existing_out,
        check=out_kept,
    ),
    rollout("out_kept_on_bad_pack", pack="{tmp}/missing", mentions=("not found",), setup=existing_out, check=out_kept),
    rollout(
        "out_kept_on_broken_reward",
        mentions=("reward_v1.py", "ZeroDivisionError"),
        setup=broken_reward_with_out,
        check=out_kept,
    ),
    # ---- other arguments
    rollout("policy_unknown", "--policy", "oracle", mentions=("--policy", "invalid choice")),
    rollout("profile_unknown", "--profile", "staging", mentions=("--profile", "staging")),
    rollout("reward_fn_unknown", "--reward-fn", "v7", mentions=("reward function", "v7")),
    rollout("unknown_option", "--episdoes", "3", mentions=("unrecognized arguments",)),
    Probe("args_rollout_without_out", ("env", "rollout", "--scenario", PACK), pack_with(), ("--out",)),
    Probe("args_validate_missing_folder", ("env", "validate", "--scenario", "{tmp}/nope"), None, ("nope", "not found")),
    Probe(
        "args_validate_a_file",
        ("env", "validate", "--scenario", "{tmp}/pack.txt"),
        file_not_folder,
        ("pack.txt", "not found"),
    ),
    Probe("args_validate_empty_path", ("env", "validate", "--scenario", ""), None, ("empty path",)),
    Probe(
        "args_validate_timeout_zero", ("env", "validate", "--scenario", CREDIT, "--timeout", "0"), None, ("--timeout",)
    ),
    Probe(
        "args_validate_timeout_nan", ("env", "validate", "--scenario", CREDIT, "--timeout", "nan"), None, ("--timeout",)
    ),
    Probe("args_validate_unknown_flag", ("env", "validate", "--scenario", CREDIT, "--jsn"), None, ("unrecognized",)),
    Probe("args_describe_missing_folder", ("env", "describe", "--scenario", "{tmp}/nope"), None, ("not found",)),
    Probe(
        "args_describe_broken_pack",
        ("env", "describe", "--scenario", PACK),
        pack_with(scenario=SCENARIO.replace("horizon: 5", "horizon: 0")),
        ("scenario.yaml:3", "horizon"),
    ),
    Probe("args_env_without_action", ("env",), None, ("ACTION",)),
    Probe("args_env_unknown_action", ("env", "frobnicate"), None, ("invalid choice",)),
]
