"""``rlops env validate | describe | rollout`` on the credit pack (in process, through
``rlops.cli.main``): output, exit codes, the trace files a rollout writes, bad arguments."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from rlops.cli import main
from rlops.common.config import REPO_ROOT

REPO = REPO_ROOT
CREDIT = REPO / "scenarios" / "credit_approval"

TRACE_COLUMNS = [
    "trace_id",
    "episode_id",
    "step",
    "ts",
    "scenario",
    "source",
    "test_group",
    "policy_version",
    "reward_fn_version",
    "action",
    "action_mask",
    "logp",
    "entropy",
    "value",
    "reward_total",
    "reward_breakdown",
    "done",
    "latency_ms",
    "error",
]


@pytest.fixture(autouse=True)
def _skip_liveness(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The random-rollout liveness check of ``load_pack`` is covered by the sandbox tests; here it
    would only repeat a second of work per command. ``test_validate_ok`` keeps it."""
    if request.node.name != "test_validate_ok":
        monkeypatch.setattr("rlops.sandbox.pack.check_no_dead_ends", lambda pack: None)


def sha(label: str) -> str:
    return hashlib.sha256((CREDIT / f"reward_{label}.py").read_bytes()).hexdigest()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "env", "validate", "--scenario", str(CREDIT))
    assert rc == 0 and err == ""
    assert out.strip() == (
        "ok: credit_approval — 19 fields, 7 actions, profiles ['live', 'sandbox'], "
        "reward functions ['v0', 'v1'], 10 rules"
    )


def test_describe_text(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "env", "describe", "--scenario", str(CREDIT))
    assert rc == 0
    assert out.startswith("credit_approval: A loan application arrives")
    lines = out.splitlines()
    score = next(x for x in lines if x.strip().startswith("user_profile.credit_score"))
    assert "int" in score and "[300.0, 900.0]" in score
    assert any(x.strip().startswith("hidden.is_fraud") and x.endswith("(hidden)") for x in lines)
    assert any(x.strip().startswith("escalate_to_human") for x in lines)
    assert "profiles: sandbox, live" in out
    assert f"reward v1: sha256 {sha('v1')[:12]}…" in out


def test_describe_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "env", "describe", "--scenario", str(CREDIT), "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["name"] == "credit_approval" and d["horizon"] == 10
    assert len(d["state"]) == 19 and len(d["actions"]) == 7
    emp = next(f for f in d["state"] if f["path"] == "user_profile.employment")
    assert emp["type"] == "enum" and emp["init"] == "categorical"
    assert emp["values"] == ["salaried", "self_employed", "unemployed", "retired"]
    assert next(f for f in d["state"] if f["path"] == "hidden.default_prob")["init"] == "expr"
    assert next(f for f in d["state"] if f["path"] == "hidden.is_fraud")["observed"] is False
    esc = next(a for a in d["actions"] if a["name"] == "escalate_to_human")
    assert esc["human_takeover"] is True and esc["terminal"] is True
    assert d["profiles"]["live"]["population"] == [{"name": "elderly", "probability": 0.15}]
    assert d["profiles"]["live"]["error_rates"] == {"fraud_api": 0.012, "credit_bureau": 0.02, "sms": 0.037}
    assert d["reward_functions"]["v0"]["version"] == sha("v0")
    assert d["reward_functions"]["v1"]["version"] == sha("v1")
    assert "OPS_v2.0_2.3" in d["reward_functions"]["v1"]["rule_refs"]
    assert d["observation_dim"] == 45  # 34 state features (region: 5 one-hot), 7 mask bits, 4 history


def test_describe_state_only(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "env", "describe", "--scenario", str(CREDIT), "--state", "--json")
    assert rc == 0 and set(json.loads(out)) == {"name", "state"}
    rc, out, _ = run(capsys, "env", "describe", "--scenario", str(CREDIT), "--state")
    assert rc == 0 and "actions:" not in out and "user_profile.age" in out


def test_rollout_rules_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "traces" / "rules.parquet"
    rc, out, err = run(
        capsys, "env", "rollout", "--scenario", str(CREDIT), "--episodes", "40", "--seed", "3", "--out", str(out_file)
    )
    assert rc == 0, err
    assert out.strip() == f"wrote 160 trace rows of 40 episodes (rules, profile sandbox, reward v1) to {out_file}"
    df = pd.read_parquet(out_file)
    assert len(df) == 160  # the rule engine decides in 4 steps
    assert set(TRACE_COLUMNS) <= set(df.columns)
    assert not any(c.startswith("state.hidden.") for c in df.columns), "hidden fields never reach a trace"
    assert df["episode_id"].nunique() == 40 and set(df["step"]) == {0, 1, 2, 3}
    assert (df["reward_fn_version"] == sha("v1")).all()
    assert (df["source"] == "sandbox").all() and (df["policy_version"] == "rules").all()
    first = df[df["step"] == 0]
    assert first["state.user_profile.credit_score"].isna().all(), "not visible before the credit report"
    assert df[df["step"] == 3]["state.user_profile.credit_score"].notna().all()
    assert (first["action"] == "initiate_fraud_check").all()
    assert (first["action_mask"] == "1100010").all()
    for total, bd in zip(df["reward_total"], df["reward_breakdown"]):
        doc = json.loads(bd)
        assert doc["total"] == pytest.approx(total, abs=1e-6)
        assert sum(b["score"] for b in doc["breakdown"]) == pytest.approx(total, abs=1e-5)
    assert df.groupby("episode_id")["done"].sum().eq(1).all()


def test_rollout_random_jsonl_live_v0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "random.jsonl"
    rc, out, err = run(
        capsys,
        "env",
        "rollout",
        "--scenario",
        str(CREDIT),
        "--policy",
        "random",
        "--episodes",
        "30",
        "--profile",
        "live",
        "--reward-fn",
        "v0",
        "--out",
        str(out_file),
    )
    assert rc == 0, err
    assert "(random, profile live, reward v0)" in out
    rows = [json.loads(x) for x in out_file.read_text().splitlines()]
    assert rows and {r["reward_fn_version"] for r in rows} == {sha("v0")}
    assert {r["policy_version"] for r in rows} == {"random"}
    assert len({r["episode_id"] for r in rows}) == 30


def test_rollout_is_reproducible(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frames = []
    for name in ("a", "b"):
        out_file = tmp_path / f"{name}.parquet"
        assert (
            run(
                capsys,
                "env",
                "rollout",
                "--scenario",
                str(CREDIT),
                "--policy",
                "random",
                "--episodes",
                "20",
                "--seed",
                "9",
                "--out",
                str(out_file),
            )[0]
            == 0
        )
        frames.append(pd.read_parquet(out_file).drop(columns=["trace_id", "ts"]))
    pd.testing.assert_frame_equal(frames[0], frames[1])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--episodes", "5", "--out", "traces.csv"], "expected a .jsonl or .parquet file name"),
        (["--episodes", "0", "--out", "t.jsonl"], "--episodes 0: expected a positive number of episodes"),
        (["--profile", "prod", "--out", "t.jsonl"], "--profile prod: pack credit_approval has profiles live, sandbox"),
    ],
)
def test_rollout_bad_arguments(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "env", "rollout", "--scenario", str(CREDIT), *argv)
    assert rc == 2 and out == ""
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not list(tmp_path.iterdir()), "nothing written"


def test_rollout_unknown_reward_fn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(
        capsys,
        "env",
        "rollout",
        "--scenario",
        str(CREDIT),
        "--reward-fn",
        "v9",
        "--episodes",
        "5",
        "--out",
        str(tmp_path / "t.jsonl"),
    )
    assert rc == 2 and out == "" and "Traceback" not in err
    assert err.startswith("error: reward function 'v9'") and "has v0, v1" in err
    assert not (tmp_path / "t.jsonl").exists()


def test_unknown_pack_and_missing_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "env", "describe", "--scenario", str(tmp_path / "missing"))
    assert rc == 2 and "scenario pack folder not found" in err
    with pytest.raises(SystemExit) as info:
        main(["env"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["env", "rollout", "--scenario", str(CREDIT)])  # --out is required
    assert info.value.code == 2


def test_rollout_dry_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "t.parquet"
    rc, out, err = run(
        capsys,
        "env",
        "rollout",
        "--scenario",
        str(CREDIT),
        "--episodes",
        "5",
        "--out",
        str(out_file),
        "--dry-run",
        "--json",
    )
    assert rc == 0 and err == ""
    res = json.loads(out)
    assert res["dry_run"] is True and res["episodes"] == 5 and res["rows"] > 0
    assert not out_file.exists()
