"""agent_sdk: the tracer's files, flush rules and crash safety; rollout/episode records."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import textwrap
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from rlops.agent_sdk import (
    ActionExecutor,
    Episode,
    ExecutionResult,
    RewardProvider,
    StateObserver,
    Tracer,
    TraceWriteError,
    current_episode,
    rollout,
)
from rlops.common.config import REPO_ROOT

REPO = REPO_ROOT
NAME = re.compile(r"^\d{8}T\d{12}Z-[A-Za-z0-9_.]+-\d+-\d{6}\.jsonl$")


def files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.jsonl"))


def lines(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in files(root) for line in f.read_text().splitlines()]


def rec(i: int, scenario: str = "credit_approval") -> dict[str, Any]:
    return {"scenario": scenario, "step": i, "action": "screen"}


def test_flushes_every_n_records_then_on_close(tmp_path):
    tracer = Tracer(tmp_path, flush_every=3, flush_interval_s=None)
    for i in range(7):
        tracer.record(rec(i))
    assert [len(f.read_text().splitlines()) for f in files(tmp_path)] == [3, 3]
    assert len(tracer) == 1
    tracer.close()
    assert [r["step"] for r in lines(tmp_path)] == list(range(7))
    assert len(files(tmp_path)) == 3 and tracer.files_written[0].startswith("file://")
    path = files(tmp_path)[0]
    assert NAME.match(path.name), path.name
    assert path.parent.parent.parent.name == "scenario=credit_approval"
    assert re.match(
        r"date=\d{4}-\d{2}-\d{2}/hour=\d{2}$", "/".join(path.parent.relative_to(path.parent.parent.parent).parts)
    )
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")]
    tracer.close()  # idempotent
    with pytest.raises(RuntimeError, match="after close"):
        tracer.record(rec(8))


def test_flush_interval_and_one_file_per_scenario(tmp_path):
    tracer = Tracer(tmp_path, flush_every=100, flush_interval_s=0.0)
    tracer.record(rec(0))
    assert len(files(tmp_path)) == 1  # the oldest record was already "old enough"
    tracer.flush_interval_s = None
    for i in range(4):
        tracer.record(rec(i, "credit_approval" if i % 2 else "claims"))
    written = tracer.flush()
    assert len(written) == 2 and {"scenario=claims", "scenario=credit_approval"} <= {
        p.parent.parent.parent.name for p in files(tmp_path)
    }
    assert tracer.flush() == []


def test_context_manager_flushes(tmp_path):
    with Tracer(f"file://{tmp_path}", flush_every=50) as tracer:
        tracer.record(rec(1))
        assert not files(tmp_path)
    assert lines(tmp_path) == [rec(1)]


def test_values_are_serialised(tmp_path):
    from datetime import datetime

    import numpy as np

    with Tracer(tmp_path) as tracer:
        tracer.record(
            {
                "scenario": "s",
                "a": np.float32(0.5),
                "b": np.arange(2),
                "c": datetime(2026, 1, 1, tzinfo=UTC),
                "d": {"x"},
            }
        )
    assert lines(tmp_path) == [{"scenario": "s", "a": 0.5, "b": [0, 1], "c": "2026-01-01T00:00:00+00:00", "d": ["x"]}]


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = f"import sys; sys.path.insert(0, {str(REPO)!r})\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60)


def test_atexit_flushes_what_is_buffered(tmp_path):
    out = _run(
        """
        from rlops.agent_sdk import Tracer
        t = Tracer(sys.argv[1], flush_every=1000)
        for i in range(5):
            t.record({"scenario": "s", "step": i})
        # no close(): the interpreter exits normally
    """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert [r["step"] for r in lines(tmp_path)] == list(range(5))


def test_a_crash_loses_only_the_unflushed_buffer(tmp_path):
    out = _run(
        """
        import os
        from rlops.agent_sdk import Tracer
        t = Tracer(sys.argv[1], flush_every=4, flush_interval_s=None)
        for i in range(10):          # 8 flushed in two files, 2 still buffered
            t.record({"scenario": "s", "step": i, "payload": "x" * 1000})
        os._exit(1)                  # no atexit, no close
    """,
        tmp_path,
    )
    assert out.returncode == 1
    assert len(files(tmp_path)) == 2
    assert [r["step"] for r in lines(tmp_path)] == list(range(8))  # every line parses
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")]


def test_failed_writes_keep_records(tmp_path, caplog):
    blocker = tmp_path / "landing"
    blocker.write_text("a file where the landing folder should be")
    tracer = Tracer(blocker, flush_every=2, max_buffer=3, flush_interval_s=None)
    tracer.record(rec(0))
    tracer.record(rec(1))  # automatic flush fails: logged, records kept
    assert len(tracer) == 2 and "records are kept" in caplog.text
    with pytest.raises(TraceWriteError, match="credit_approval"):
        tracer.flush()
    assert len(tracer) == 2
    tracer.record(rec(2))
    tracer.record(rec(3))  # beyond max_buffer: the oldest is dropped, and counted
    assert tracer.dropped == 1 and len(tracer) == 3
    blocker.unlink()
    tracer.close()
    assert [r["step"] for r in lines(blocker)] == [1, 2, 3]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_write_the_parents_buffer(tmp_path):
    tracer = Tracer(tmp_path, flush_every=100)
    tracer.record(rec(0))
    pid = os.fork()
    if pid == 0:  # child
        tracer.record(rec(1))
        tracer.close()
        os._exit(0)
    os.waitpid(pid, 0)
    tracer.close()
    assert sorted(r["step"] for r in lines(tmp_path)) == [0, 1]


def test_s3_landing_zone(moto_bucket, moto_s3):
    import boto3

    with Tracer(f"{moto_bucket}/landing", flush_every=2, endpoint_url=moto_s3) as tracer:
        for i in range(3):
            tracer.record(rec(i))
    keys = sorted(
        o["Key"] for o in boto3.client("s3", endpoint_url=moto_s3).list_objects_v2(Bucket="rlops-test")["Contents"]
    )
    assert len(keys) == 2 and all(k.startswith("landing/scenario=credit_approval/date=") for k in keys)
    assert NAME.match(keys[0].rsplit("/", 1)[-1])


def test_bad_configuration():
    with pytest.raises(ValueError, match="flush_every"):
        Tracer("/tmp/x", flush_every=0)
    with pytest.raises(ValueError, match="unsupported landing zone"):
        Tracer("gs://bucket/x")
    with pytest.raises(ValueError, match="no bucket"):
        Tracer("s3:///x")


# --------------------------------------------------------------------------- rollout


class Observer:
    def __init__(self) -> None:
        self.n = 0

    def observe(self) -> dict[str, Any]:
        self.n += 1
        return {"user_profile": {"credit_score": 600 + self.n}, "channel": "web"}


class Executor:
    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on

    def execute(self, action: str, state: Any) -> ExecutionResult:
        if action == self.fail_on:
            raise ConnectionError("credit bureau timeout")
        return ExecutionResult(
            latency_ms=12.5, done=action == "approve", error="slow" if action == "fraud_check" else None
        )


class Risk:
    def reward(self, state: Any, action: str, next_state: Any) -> dict[str, float]:
        return {"risk": -0.25, "sla": 1.0}


def test_interfaces_are_runtime_checkable():
    assert isinstance(Observer(), StateObserver)
    assert isinstance(Executor(), ActionExecutor)
    assert isinstance(Risk(), RewardProvider)
    assert ExecutionResult().ok and not ExecutionResult(error="x").ok


def test_rollout_traces_each_step(tmp_path):
    tracer = Tracer(tmp_path)

    @rollout(
        tracer,
        scenario="credit_approval",
        policy_version="champion-3",
        test_group="B",
        reward_provider=Risk(),
        trace_id=lambda app_id, *a, **k: app_id,
    )
    def handle(app_id: str, observer: Any, executor: Any) -> str:
        state = observer.observe()
        for action in ("screen", "fraud_check", "approve"):
            current_episode().annotate(action_mask=[True, True, False], logp=-0.1)
            if executor.execute(action, state).done:
                return action
            state = observer.observe()
        return "none"

    assert handle("req-77", Observer(), executor=Executor()) == "approve"
    tracer.close()
    recs = lines(tmp_path)
    assert [r["step"] for r in recs] == [0, 1, 2]
    assert {r["trace_id"] for r in recs} == {"req-77"} and len({r["episode_id"] for r in recs}) == 1
    assert [r["state.user_profile.credit_score"] for r in recs] == [601, 602, 603]
    assert [r["done"] for r in recs] == [False, False, True] and recs[-1]["terminated"]
    assert recs[1]["error"] == "slow" and recs[0]["latency_ms"] == 12.5
    assert recs[0]["action_mask"] == "110" and recs[0]["test_group"] == "B"
    assert recs[0].get("reward_total") is None  # the pack's reward; the provider's scores are hook components
    assert recs[0]["reward_breakdown"][0] == {"component": "hook:risk", "score": -0.25, "reason": "external score risk"}
    assert recs[0]["ts"] < recs[1]["ts"] < recs[2]["ts"]


def test_an_exception_truncates_the_episode(tmp_path):
    tracer = Tracer(tmp_path)

    @rollout(tracer, scenario="s", policy_version="1")
    def handle(observer: Any, executor: Any, episode: Episode) -> None:
        episode.set(test_group="A")
        state = observer.observe()
        executor.execute("screen", state)
        executor.execute("credit_report", observer.observe())

    with pytest.raises(ConnectionError):
        handle(Observer(), Executor(fail_on="credit_report"))
    tracer.close()
    recs = lines(tmp_path)
    assert [r["action"] for r in recs] == ["screen", "credit_report"]
    assert recs[-1]["done"] and recs[-1]["truncated"] and not recs[-1]["terminated"]
    assert "credit bureau timeout" in recs[-1]["error"] and recs[0]["test_group"] == "A"


def test_async_rollout(tmp_path):
    tracer = Tracer(tmp_path)

    class AsyncExecutor:
        async def execute(self, action: str, state: Any) -> ExecutionResult:
            await asyncio.sleep(0)
            return ExecutionResult(done=True)

    @rollout(tracer, scenario="s", policy_version="1")
    async def handle(observer: Any, executor: Any) -> None:
        await executor.execute("approve", observer.observe())

    asyncio.run(handle(Observer(), AsyncExecutor()))
    tracer.close()
    (only,) = lines(tmp_path)
    assert only["done"] and only["latency_ms"] >= 0


def test_manual_episode(tmp_path):
    tracer = Tracer(tmp_path)
    with Episode(tracer, scenario="s", policy_version="1", source="sandbox") as ep:
        assert current_episode() is ep
        s = ep.observe({"a": 1})
        ep.step(s, "screen", action_mask="10", custom_note="hello")
        ep.step(None, "approve", next_state={"a": 2})  # state defaults to the last one
    with pytest.raises(RuntimeError, match="outside a @rollout"):
        current_episode()
    with pytest.raises(ValueError, match="unknown field"):
        ep.set(action="x")
    tracer.close()
    recs = lines(tmp_path)
    assert [r["state.a"] for r in recs] == [1, 1] and recs[0]["custom_note"] == "hello"
    assert recs[-1]["done"] and recs[0]["source"] == "sandbox"


def test_annotate_before_or_after_executing(tmp_path):
    """``decide → annotate → execute`` and ``decide → execute → annotate`` both attach the
    fields to the step they describe, the terminal step included."""
    tracer = Tracer(tmp_path)

    @rollout(tracer, scenario="s", policy_version="1")
    def after(observer: Any, executor: Any, episode: Episode) -> None:
        state = observer.observe()
        for i, action in enumerate(("screen", "fraud_check", "approve")):
            executor.execute(action, state)
            episode.annotate(logp=-float(i), fallback=i == 1)
            state = observer.observe() if action != "approve" else state

    @rollout(tracer, scenario="s", policy_version="1")
    def before_without_observing(executor: Any, episode: Episode) -> None:
        state = {"a": 1}
        for i, action in enumerate(("screen", "fraud_check", "approve")):
            episode.annotate(logp=-float(i))
            executor.execute(action, state)

    after(Observer(), Executor())
    before_without_observing(executor=Executor())
    tracer.close()
    recs = lines(tmp_path)
    assert [r["logp"] for r in recs] == [0.0, -1.0, -2.0] * 2
    assert [r["fallback"] for r in recs[:3]] == [False, True, False]
    assert [r["done"] for r in recs] == [False, False, True] * 2
