"""Audit and replay probes: one untrusted row in the trace store never takes ``rlops audit`` or
``rlops replay`` down. Trace rows of a rule-engine rollout are stored with one row changed the way
an agent, an older rlops or a hand-written file could change it; both commands must still answer
(exit 0), the bad row rendering as "no breakdown". And the contract: every shape of
``reward_breakdown`` the runtime and the SDK write is accepted and normalised, any other shape is
quarantined with its reason. One test per probe."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from .io_harness import IOProbe, Verdict, check, cli, expect_cli_error, ids, run_probe


@functools.lru_cache(maxsize=1)
def rows() -> pd.DataFrame:
    from rlops.common.config import REPO_ROOT
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    return rollout_traces(pack, rule_policy, 12, seed=3)


BAD_BREAKDOWNS: dict[str, Any] = {
    "sdk_list": json.dumps([{"component": "approve_ok", "score": 1.0}]),
    "flat_dict": json.dumps({"approve_ok": 1.0, "sla": -0.5}),
    "json_text": json.dumps("a string"),
    "not_json": "{{{",
    "list_of_numbers": "[1, 2, 3]",
    "score_is_text": json.dumps({"total": 1, "breakdown": [{"component": "a", "score": "high"}]}),
    "breakdown_is_object": json.dumps({"total": 1, "breakdown": {"component": "a", "score": 1}}),
    "item_without_component": json.dumps({"total": 1, "breakdown": [{"score": 1}]}),
    "deeply_nested": "[" * 5000 + "]" * 5000,
    "empty_text": "",
    "null_literal": "null",
    "huge_component_list": json.dumps([{"component": f"c{i}", "score": 1} for i in range(5000)]),
}


def stored_with(tmp: Path, column: str, value: Any) -> tuple[Path, str]:
    """The rows with one changed; the trace id to replay: the changed row itself for a breakdown
    (it must render), else the last step of its episode (the episode must still replay)."""
    df = rows().copy()
    df[column] = df[column].astype(object)
    victim = len(df) // 2
    df.loc[victim, column] = value
    path = tmp / "traces.parquet"
    df.to_parquet(path, index=False)
    if column == "reward_breakdown":
        return path, str(df.loc[victim, "trace_id"])
    episode = df[df["episode_id"] == df.loc[victim, "episode_id"]]
    return path, str(episode["trace_id"].iloc[-1])


def tool_answers(id: str, column: str, value: Any) -> list[IOProbe]:
    def replay(tmp: Path) -> Verdict:
        path, trace = stored_with(tmp, column, value)
        rc, out, err = cli(
            ["replay", "--scenario", "credit_approval", "--trace-id", trace, "--traces", str(path), "--json"]
        )
        if rc != 0:
            return (
                "traceback" if "internal error" in err or rc == 1 else "accepted"
            ), f"exit {rc}: {err.strip()[-300:]}"
        return None if json.loads(out)["trace_id"] == trace else ("lost", out[:200])

    def audit(tmp: Path) -> Verdict:
        path, _ = stored_with(tmp, column, value)
        rc, out, err = cli(["audit", "--scenario", "credit_approval", "--traces", str(path), "--dry-run", "--json"])
        if rc != 0:
            return (
                "traceback" if "internal error" in err or rc == 1 else "accepted"
            ), f"exit {rc}: {err.strip()[-300:]}"
        got = json.loads(out)
        if got["rows"] + got.get("rows_skipped", 0) != len(rows()):
            return "lost", f"{got['rows']} rows audited + {got.get('rows_skipped')} skipped != {len(rows())}"
        if column in ("action_mask", "action") and "row skipped" not in err:
            return "lost", "a row was skipped without a word"
        return None

    return [IOProbe(f"replay_row_{id}", replay, 90), IOProbe(f"audit_row_{id}", audit, 120)]


TOOL_PROBES = [
    p for name, value in BAD_BREAKDOWNS.items() for p in tool_answers(f"breakdown_{name}", "reward_breakdown", value)
]
TOOL_PROBES += tool_answers("mask_wrong_length", "action_mask", "1")
TOOL_PROBES += tool_answers("action_unknown", "action", "launch_rockets")
TOOL_PROBES += tool_answers("policy_version_garbage", "policy_version", "../../etc/passwd")


# --------------------------------------------------------------------------- other files of the store


def replay_in_folder(id: str, other: Any, mentions: tuple[str, ...] = ()) -> IOProbe:
    """``replay`` of a valid trace of a folder that also holds ``other`` (bytes, or a frame written
    as parquet): the trace replays in step order, or, with ``mentions``, exit 2 naming them."""

    def run(tmp: Path) -> Verdict:
        folder = tmp / "traces"
        folder.mkdir()
        good = rows()
        good.to_parquet(folder / "part-a.parquet", index=False)
        bad = folder / "part-b.parquet"
        if isinstance(other, bytes):
            bad.write_bytes(other)
        else:
            other.to_parquet(bad, index=False)
        episode = good[good["episode_id"] == good["episode_id"].iloc[0]]
        trace = str(episode["trace_id"].iloc[-1])
        argv = ["replay", "--scenario", "credit_approval", "--trace-id", trace, "--traces", str(folder), "--json"]
        if mentions:
            return expect_cli_error(argv, 2, mentions)
        rc, out, err = cli(argv)
        if rc != 0:
            return ("traceback" if "internal error" in err or rc == 1 else "accepted"), f"exit {rc}: {err[-300:]}"
        steps = [s["step"] for s in json.loads(out)["steps"]]
        want = sorted(int(s) for s in episode["step"])
        return None if steps == want else ("lost", f"steps {steps}, expected {want}")

    return IOProbe(f"replay_store_{id}", run, 90)


def _text_steps() -> pd.DataFrame:
    """Another episode whose ``step`` column was written as text (a hand-made or older file)."""
    df = rows().copy()
    df["episode_id"] = "other-" + df["episode_id"].astype(str)
    df["trace_id"] = "other-" + df["trace_id"].astype(str)
    df["step"] = df["step"].astype(str)
    return df


def _replay_unreadable_file(tmp: Path) -> Verdict:
    """An unreadable file asked for by name: exit 2 naming it."""
    path = tmp / "zero.parquet"
    path.write_bytes(b"")
    argv = ["replay", "--scenario", "credit_approval", "--trace-id", "x-0", "--traces", str(path), "--json"]
    return expect_cli_error(argv, 2, ("zero.parquet", "parquet"))


def _replay_step_not_a_number(tmp: Path) -> Verdict:
    """The asked row's own ``step`` is text that is no number: exit 2 naming the column."""
    df = rows().copy()
    df["step"] = df["step"].astype(str)
    df.loc[0, "step"] = "first"
    path = tmp / "traces.parquet"
    df.to_parquet(path, index=False)
    trace = str(df.loc[0, "trace_id"])
    argv = ["replay", "--scenario", "credit_approval", "--trace-id", trace, "--traces", str(path), "--json"]
    return expect_cli_error(argv, 2, (trace, "step 'first'"))


STORE_PROBES = [
    replay_in_folder("zero_byte_file", b""),
    replay_in_folder("garbage_file", b"PAR1" + b"\x00garbage" * 100),
    replay_in_folder("step_as_text_elsewhere", _text_steps()),
    IOProbe("replay_store_unreadable_file_named", _replay_unreadable_file, 90),
    IOProbe("replay_store_step_not_a_number", _replay_step_not_a_number, 90),
]


# --------------------------------------------------------------------------- the contract


def contract_shape(id: str, value: Any, accepted: bool, mention: str = "") -> IOProbe:
    def run(tmp: Path) -> Verdict:
        from rlops.data_contracts.records import flatten_state
        from rlops.data_contracts.validation import validate_frame

        from .capture_kit import contract, record

        frame = pd.DataFrame([flatten_state({**record(0, "a"), "reward_breakdown": value})], dtype=object)
        res = validate_frame(frame, contract())
        if len(res.accepted) + len(res.quarantined) != 1:
            return "lost", "a row vanished"
        if accepted:
            if len(res.accepted) != 1:
                return "lost", f"a valid shape was quarantined: {res.quarantined['quarantine_reason'].tolist()}"
            got = json.loads(res.accepted["reward_breakdown"].iloc[0])
            ok = set(got) == {"total", "breakdown"} and all(
                set(b) == {"component", "score", "reason", "rule_ref"} for b in got["breakdown"]
            )
            return None if ok else ("accepted", f"not normalised: {got}")
        if len(res.accepted):
            return "accepted", f"{value!r} accepted as a reward breakdown"
        reason = res.quarantined["quarantine_reason"].iloc[0]
        return None if "reward_breakdown" in reason and mention in reason else ("accepted", f"reason {reason!r}")

    return IOProbe(f"contract_breakdown_{id}", run)


CONTRACT_PROBES = [
    contract_shape(
        "runtime_form",
        {"total": 1.5, "breakdown": [{"component": "a", "score": 1.5, "reason": "ok", "rule_ref": "R1"}]},
        True,
    ),
    contract_shape("runtime_form_as_text", json.dumps({"total": 0, "breakdown": []}), True),
    contract_shape("sdk_list", [{"component": "a", "score": 1.0}, {"component": "b", "score": -2}], True),
    contract_shape("flat_dict", {"a": 1.0, "b": -0.5}, True),
    contract_shape("flat_dict_with_total", {"a": 1.0, "total": 1.0}, True),
    contract_shape("list_of_numbers", [1, 2, 3], False, "item 0"),
    contract_shape("string", "a string", False, "json_parseable"),
    contract_shape("number", 3, False, "expected"),
    contract_shape("score_text", [{"component": "a", "score": "high"}], False, "score"),
    contract_shape("score_bool", [{"component": "a", "score": True}], False, "score"),
    contract_shape("score_nan", [{"component": "a", "score": float("nan")}], False, "finite"),
    contract_shape("component_empty", [{"component": "", "score": 1}], False, "component"),
    contract_shape("component_number", [{"component": 7, "score": 1}], False, "component"),
    contract_shape("unknown_item_key", [{"component": "a", "score": 1, "weight": 2}], False, "weight"),
    contract_shape("breakdown_object", {"total": 1, "breakdown": {"a": 1}}, False, "'breakdown'"),
    contract_shape("total_text", {"total": "1", "breakdown": []}, False, "total"),
    contract_shape("flat_dict_text_value", {"a": "b"}, False, "component 'a'"),
    contract_shape(
        "too_many_components", [{"component": f"c{i}", "score": 1} for i in range(300)], False, "components"
    ),
    contract_shape("reason_number", [{"component": "a", "score": 1, "reason": 5}], False, "reason"),
]

PROBES = [*TOOL_PROBES, *STORE_PROBES, *CONTRACT_PROBES]


@pytest.mark.parametrize("probe", PROBES, ids=ids(PROBES))
def test_audit_probe(probe: IOProbe, isolated: Path) -> None:
    check(run_probe(probe, isolated / "probes"))
