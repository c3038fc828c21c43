"""Capture: landing-zone JSON lines → validated parquet partitions + quarantine, idempotently."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rlops.common.config import REPO_ROOT
from rlops.common.run_key import RunKey
from rlops.data_contracts import trace_contract
from rlops.pipeline_steps.capture.core import capture_landing_zone, validate_rows
from rlops.storage.backend import Storage
from rlops.trace_store.store import landing_files, write_trace_partitions

REPO = REPO_ROOT
SCENARIO = "credit_approval"
ACTIONS = ["screen", "fraud_check", "approve", "reject"]
FIELDS = [
    ("user_profile.credit_score", "int", 300, 850, None),
    ("application.channel", "enum", None, None, ["web", "branch"]),
]
START = datetime(2026, 1, 5, 10, tzinfo=UTC)
END = START + timedelta(hours=1)


@pytest.fixture(scope="module")
def contract():
    return trace_contract(SCENARIO, ACTIONS, FIELDS)


def row(step: int, ts: str, **over: Any) -> str:
    rec = {
        "trace_id": "req-1",
        "episode_id": f"ep-{ts[11:13]}",
        "step": step,
        "ts": ts,
        "scenario": SCENARIO,
        "source": "live",
        "policy_version": "champion-3",
        "state.user_profile.credit_score": 640,
        "state.application.channel": "web",
        "action": "screen",
        "action_mask": "1100",
        "logp": -0.2,
        "done": False,
    }
    rec.update(over)
    return json.dumps(rec)


def landing_file(root: Path, when: datetime, lines: list[str], seq: int = 0) -> Path:
    folder = root / f"scenario={SCENARIO}" / f"date={when:%Y-%m-%d}" / f"hour={when:%H}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{when:%Y%m%dT%H%M%S%f}Z-agent1-4242-{seq:06d}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def zone(tmp_path: Path) -> dict[str, Any]:
    landing = tmp_path / "landing"
    landing_file(
        landing,
        START + timedelta(minutes=5),
        [
            row(0, "2026-01-05T09:59:30Z"),  # buffered before the hour: partition 09
            row(1, "2026-01-05T10:01:00Z"),
            '{"trace_id": "req-2", "step": ',  # corrupt line
            "",  # blank: not a row
            row(2, "2026-01-05T10:02:00Z"),
        ],
        seq=0,
    )
    landing_file(
        landing,
        START + timedelta(minutes=40),
        [
            row(0, "2026-01-05T10:39:00Z"),
            row(1, "2026-01-05T10:39:05Z", action="launch_rocket"),  # unknown action
            row(2, "not-a-time"),  # unreadable ts
            row(3, "2026-01-05T10:39:09Z", done=True),
        ],
        seq=1,
    )
    landing_file(landing, END + timedelta(minutes=5), [row(0, "2026-01-05T11:04:00Z")], seq=2)
    hour10 = landing / f"scenario={SCENARIO}" / "date=2026-01-05" / "hour=10"
    (hour10 / ".tmp-half-written.jsonl.abc").write_text(row(0, "2026-01-05T10:00:00Z"))
    (hour10 / "notes.txt").write_text("not a trace file")
    return {
        "storage": Storage(f"file://{tmp_path}"),
        "landing": f"file://{landing}",
        "traces": f"file://{tmp_path / 'traces'}",
        "tmp": tmp_path,
    }


def run(zone: dict[str, Any], contract, **kw: Any):
    return capture_landing_zone(
        zone["storage"],
        zone["landing"],
        zone["traces"],
        SCENARIO,
        contract,
        kw.pop("start", START),
        kw.pop("end", END),
        **kw,
    )


def stored(zone: dict[str, Any]) -> list[Path]:
    """Every parquet file written: trace partitions and quarantine."""
    return sorted(p for p in zone["tmp"].rglob("*.parquet"))


def test_capture_end_to_end(zone, contract):
    res = run(zone, contract)
    assert (res.rows_in, res.rows_accepted, res.rows_quarantined) == (8, 5, 3)
    assert len(res.files_read) == 2  # the 11:05 file, the temp file and notes.txt are not read
    assert [p.rsplit("/", 1)[-1] for p in res.partitions] == ["hour=09", "hour=10"]
    storage = zone["storage"]
    traces = storage.read_parquet(zone["traces"] + f"/scenario={SCENARIO}")
    assert len(traces) == 5 and traces["step"].dtype == "int64"
    assert str(traces["ts"].dtype) == "datetime64[us, UTC]"
    assert set(traces.columns) >= set(contract.column_names)

    assert res.quarantine_uri == f"file://{zone['tmp']}/quarantine/scenario={SCENARIO}"
    q = storage.read_parquet(res.quarantine_uri)
    assert len(q) == 3
    reasons = " | ".join(q["quarantine_reason"])
    assert "not valid JSON" in reasons
    assert "expect_column_values_to_be_in_set[action]" in reasons
    assert "expect_column_values_to_not_be_null[ts]" in reasons
    assert '{"trace_id": "req-2", "step": ' in q["raw"].tolist()  # kept with its raw text
    where = sorted(zip(q["source_uri"].str.rsplit("-", n=1).str[-1], q["line_no"]))
    assert where == [("000000.jsonl", 3), ("000001.jsonl", 2), ("000001.jsonl", 3)]
    # The unreadable-ts row lands in the interval's first hour.
    assert any("hour=10" in p for p in res.quarantine_partitions)

    manifest = storage.read_json(res.manifest_uri)
    assert manifest["status"] == "complete" and sorted(manifest["files"]) == sorted(res.files_written)


def test_rerun_overwrites_instead_of_duplicating(zone, contract):
    first = run(zone, contract)
    files_first = stored(zone)
    second = run(zone, contract, chunk_rows=2)  # different chunking, more files
    assert second.rows_accepted == first.rows_accepted
    traces = zone["storage"].read_parquet(zone["traces"] + f"/scenario={SCENARIO}")
    assert len(traces) == 5 and not traces.duplicated(["episode_id", "step"]).any()
    assert len(zone["storage"].read_parquet(second.quarantine_uri)) == 3
    assert sorted(map(str, stored(zone))) == sorted(u[7:] for u in second.files_written)
    third = run(zone, contract)
    assert stored(zone) == files_first and third.files_written == first.files_written


def test_late_files_are_picked_up_on_rerun(zone, contract):
    run(zone, contract)
    landing_file(Path(zone["landing"][7:]), START + timedelta(minutes=59), [row(9, "2026-01-05T10:59:00Z")], seq=7)
    res = run(zone, contract)
    assert res.rows_accepted == 6
    assert len(zone["storage"].read_parquet(zone["traces"] + f"/scenario={SCENARIO}")) == 6


def test_dry_run_writes_nothing(zone, contract):
    res = run(zone, contract, dry_run=True)
    assert res.dry_run and (res.rows_in, res.rows_accepted, res.rows_quarantined) == (8, 5, 3)
    assert res.files_written and res.manifest_uri is None
    assert not Path(zone["traces"][7:]).exists() and not stored(zone)
    real = run(zone, contract)
    assert real.files_written == res.files_written  # the dry run said exactly this
    before = stored(zone)
    run(zone, contract, dry_run=True)
    assert stored(zone) == before  # and a dry run deletes nothing either


def test_a_crashed_run_is_cleaned_up_by_the_next(zone, contract, monkeypatch):
    storage = zone["storage"]
    real_write = Storage.write_parquet
    calls = {"n": 0}

    def failing(self, uri, data, compression="zstd", **options):
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError("disk full")
        return real_write(self, uri, data, compression, **options)

    monkeypatch.setattr(Storage, "write_parquet", failing)
    with pytest.raises(OSError, match="disk full"):
        run(zone, contract, chunk_rows=1)
    assert stored(zone)  # partial output of the crashed run
    monkeypatch.setattr(Storage, "write_parquet", real_write)
    res = run(zone, contract)  # bigger chunks: other file names than the crashed run
    assert sorted(map(str, stored(zone))) == sorted(u[7:] for u in res.files_written)
    assert len(storage.read_parquet(zone["traces"] + f"/scenario={SCENARIO}")) == 5


def test_bytes_that_are_not_utf8_quarantine_only_their_line(tmp_path, contract):
    path = landing_file(
        tmp_path / "landing",
        START + timedelta(minutes=3),
        [row(0, "2026-01-05T10:01:00Z"), row(1, "2026-01-05T10:02:00Z")],
    )
    good = path.read_bytes().splitlines()
    path.write_bytes(b"\n".join([good[0], b'{"trace_id": "caf\xe9"}', good[1]]) + b"\n")
    storage = Storage(f"file://{tmp_path}")
    res = capture_landing_zone(
        storage, f"file://{tmp_path}/landing", f"file://{tmp_path}/traces", SCENARIO, contract, START, END, chunk_rows=2
    )
    assert (res.rows_in, res.rows_accepted, res.rows_quarantined) == (3, 2, 1)
    q = storage.read_parquet(res.quarantine_uri)
    assert q["quarantine_reason"].tolist() == ["encoding: line is not valid UTF-8"]
    assert q["raw"].iloc[0] == '{"trace_id": "caf\ufffd"}' and q["line_no"].iloc[0] == 2


def test_interval_selection_and_errors(zone, contract):
    storage = zone["storage"]
    assert len(landing_files(storage, zone["landing"], SCENARIO, START, START + timedelta(minutes=15))) == 1
    assert (
        len(landing_files(storage, zone["landing"], SCENARIO, START - timedelta(hours=3), END + timedelta(hours=1)))
        == 3
    )
    empty = run(zone, contract, start=START - timedelta(days=1), end=START - timedelta(hours=23))
    assert (empty.rows_in, empty.partitions, empty.quarantine_uri) == (0, [], None)
    with pytest.raises(ValueError, match="start before end"):
        run(zone, contract, start=END, end=START)
    with pytest.raises(ValueError, match="ISO-8601"):
        run(zone, contract, start="yesterday", end=END)
    assert str(RunKey.between("2026-01-05T10:00:00Z", END)) == "20260105T1000"
    assert str(RunKey.between(START, START + timedelta(minutes=15))) == "20260105T1000-15m"


def test_row_writing_helpers_are_reusable(tmp_path, contract):
    df = pd.DataFrame([json.loads(row(i, f"2026-01-05T1{i}:00:00Z")) for i in range(3)])
    df.loc[1, "state.user_profile.credit_score"] = 9000
    accepted, quarantined = validate_rows(df, contract)
    assert (len(accepted), len(quarantined)) == (2, 1)
    storage = Storage(f"file://{tmp_path}")
    files = write_trace_partitions(storage, accepted, f"file://{tmp_path}/t", "sandbox-run-1", contract=contract)
    assert [f.split("/")[-2] for f in files] == ["hour=10", "hour=12"]
    assert all(f.endswith("part-sandbox-run-1-00000.parquet") for f in files)
    assert len(storage.read_parquet(f"file://{tmp_path}/t")) == 2


def test_capture_on_s3(moto_bucket, moto_s3, tmp_path, contract):
    storage = Storage(moto_bucket, endpoint_url=moto_s3)
    local = tmp_path / "landing"
    path = landing_file(local, START + timedelta(minutes=1), [row(0, "2026-01-05T10:00:30Z"), "oops"])
    storage.upload_file(path, f"{moto_bucket}/landing/{path.relative_to(local)}")
    res = capture_landing_zone(
        storage, f"{moto_bucket}/landing", f"{moto_bucket}/traces", SCENARIO, contract, START, END
    )
    assert (res.rows_in, res.rows_accepted, res.rows_quarantined) == (2, 1, 1)
    assert res.partitions[0].startswith(f"{moto_bucket}/traces/scenario={SCENARIO}/")
    assert len(storage.read_parquet(res.partitions[0])) == 1
    again = capture_landing_zone(
        storage, f"{moto_bucket}/landing", f"{moto_bucket}/traces", SCENARIO, contract, START, END
    )
    assert storage.list(moto_bucket, suffix=".parquet") == sorted(again.files_written)
    assert again.quarantine_uri == f"{moto_bucket}/quarantine/scenario={SCENARIO}"


def test_tracer_to_capture_round_trip(tmp_path, contract):
    from rlops.agent_sdk import ExecutionResult, Tracer, rollout

    class Observer:
        def observe(self) -> dict[str, Any]:
            return {"user_profile": {"credit_score": 700}, "application": {"channel": "web"}}

    class Executor:
        def execute(self, action: str, state: Any) -> ExecutionResult:
            return ExecutionResult(done=action == "approve")

    with Tracer(tmp_path / "landing", flush_every=2) as tracer:

        @rollout(tracer, scenario=SCENARIO, policy_version="champion-3")
        def episode(observer, executor, episode) -> None:
            state = observer.observe()
            for action in ("screen", "fraud_check", "approve"):
                episode.annotate(action_mask=[True, True, True, False])
                if executor.execute(action, state).done:
                    return
                state = observer.observe()

        episode(Observer(), Executor())
    now = datetime.now(UTC)
    res = capture_landing_zone(
        Storage(f"file://{tmp_path}"),
        f"file://{tmp_path}/landing",
        f"file://{tmp_path}/traces",
        SCENARIO,
        contract,
        now - timedelta(hours=1),
        now + timedelta(minutes=1),
    )
    assert (res.rows_in, res.rows_accepted) == (3, 3), res


@pytest.mark.slow
def test_memory_stays_bounded_on_a_million_rows(tmp_path):
    """Peak RSS on 1M rows is about that on 100k rows: only one chunk is ever in memory."""
    script = textwrap.dedent(f"""
        import json, resource, sys
        from datetime import datetime, timedelta, timezone
        sys.path.insert(0, {str(REPO)!r})
        from rlops.data_contracts import trace_contract
        from rlops.pipeline_steps.capture.core import capture_landing_zone
        from rlops.storage.backend import Storage
        n, root = int(sys.argv[1]), sys.argv[2]
        start = datetime(2026, 1, 5, 10, tzinfo=timezone.utc)
        folder = f"{{root}}/landing/scenario=s/date=2026-01-05/hour=10"
        import os; os.makedirs(folder)
        line = json.dumps({{"trace_id": "t", "episode_id": "e", "step": 12345678,
            "ts": "2026-01-05T10:30:00Z", "scenario": "s", "source": "live",
            "policy_version": "1", "state.x": 0.5, "state.y": 3, "action": "a",
            "action_mask": "11", "logp": -0.1, "done": False}})
        with open(f"{{folder}}/20260105T100100000000Z-h-1-000000.jsonl", "w") as fh:
            for i in range(n):
                fh.write(line.replace("12345678", str(i)) + "\\n")
        contract = trace_contract("s", ["a", "b"], [("x", "float", 0, 1), ("y", "int", 0, 9)])
        res = capture_landing_zone(Storage("file://" + root), f"file://{{root}}/landing",
            f"file://{{root}}/traces", "s", contract, start, start + timedelta(hours=1),
            chunk_rows=50_000)
        assert res.rows_in == res.rows_accepted == n, res
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """)
    rss = {}
    for n in (100_000, 1_000_000):
        out = subprocess.run(
            [sys.executable, "-c", script, str(n), str(tmp_path / str(n))],
            capture_output=True,
            text=True,
            check=True,
            timeout=900,
        )
        rss[n] = int(out.stdout.strip().splitlines()[-1])  # KiB
    assert rss[1_000_000] < rss[100_000] * 1.25 + 50_000, rss


def test_explicit_run_key(zone, contract):
    res = run(zone, contract, run_key="20260105T1000")
    assert all("part-20260105T1000-" in f for f in res.files_written)
    with pytest.raises(ValueError, match="run key"):
        run(zone, contract, run_key="../escape")
