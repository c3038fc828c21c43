"""Tracking: experiments per scenario, registry versions, alias moves and their failure modes."""

from __future__ import annotations

import hashlib
import os
import socket
import time
from pathlib import Path

import pytest

from rlops.common.config import load_params
from rlops.registry.aliases import move_champion, rollback
from rlops.registry.client import (
    ListTracker,
    MetricsTracker,
    NullTracker,
    Tracker,
    TrackingError,
    policy_model_name,
    reward_fn_model_name,
    reward_model_name,
)

SCENARIO = "credit_approval"


@pytest.fixture
def tracker(tmp_tracking: str) -> Tracker:
    return Tracker.from_params(load_params(), SCENARIO)


def _register(tracker: Tracker, tmp_path: Path, n: int) -> list[str]:
    """Register ``n`` policy versions, each from its own run."""
    versions = []
    for i in range(n):
        ckpt = tmp_path / f"ckpt{i}" / "policy.pt"
        ckpt.parent.mkdir()
        ckpt.write_bytes(b"weights%d" % i)
        with tracker.start_run(f"train-{i}", tags={"step": "train_policy"}) as run:
            run.log_artifact(ckpt.parent, artifact_path="policy")
            versions.append(
                tracker.register_model(
                    run.run_id, "policy", policy_model_name(SCENARIO), tags={"reward_fn_version": "v1", "i": i}
                )
            )
    return versions


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_names_and_metric_sinks() -> None:
    assert (policy_model_name("s"), reward_model_name("s"), reward_fn_model_name("s")) == (
        "s-policy",
        "s-reward-model",
        "s-reward-fn",
    )
    sink = ListTracker()
    sink.log_params({"lr": 3e-4})
    sink.log_metrics({"loss": 1.0, "return": 2}, step=0)
    sink.log_metrics({"loss": 0.5}, step=1)
    assert sink.series("loss") == [1.0, 0.5] and sink.rows[0] == {"step": 0, "loss": 1.0, "return": 2.0}
    assert sink.params == {"lr": 3e-4}
    assert isinstance(sink, MetricsTracker) and isinstance(NullTracker(), MetricsTracker)


def test_experiment_per_scenario_and_run_logging(tracker: Tracker, tmp_tracking: str, tmp_path: Path) -> None:
    exp_id = tracker.experiment_id
    assert tracker.experiment_id == exp_id  # cached, not recreated
    other = tracker.experiment_id_for("complaints")
    assert other != exp_id
    exp = tracker.client.get_experiment(exp_id)
    assert exp.name == SCENARIO
    assert exp.artifact_location.startswith("file://") and "artifacts" in exp.artifact_location
    # A second tracker on the same backend finds the experiment instead of failing.
    assert Tracker.from_params(load_params(), SCENARIO).experiment_id == exp_id

    with tracker.start_run("train", tags={"kind": "test"}) as run:
        assert isinstance(run, MetricsTracker)
        run.log_params({"lr": 0.0003, "clip": 0.2})
        for step in range(3):
            run.log_metrics({"loss": 1.0 / (step + 1), "return": float(step)}, step=step)
        run.log_metric_steps((step, {"curve": 0.5 * step}) for step in range(1500))  # two batches of 1000
        run.log_dict({"gates": {"return": True}}, "gates.json")
        run.log_text("hello", "notes/readme.txt")
        run.set_tags({"data_version": "d1"})
    data = tracker.client.get_run(run.run_id)
    assert data.info.status == "FINISHED" and data.info.experiment_id == exp_id
    assert data.data.params == {"lr": "0.0003", "clip": "0.2"}
    assert data.data.tags["data_version"] == "d1" and data.data.tags["kind"] == "test"
    history = tracker.client.get_metric_history(run.run_id, "loss")
    assert [m.step for m in history] == [0, 1, 2]
    curve = tracker.client.get_metric_history(run.run_id, "curve")
    assert sorted((m.step, m.value) for m in curve) == [(s, 0.5 * s) for s in range(1500)]
    arts = {a.path for a in tracker.client.list_artifacts(run.run_id)}
    assert {"gates.json", "notes"} <= arts

    with pytest.raises(RuntimeError, match="boom"), tracker.start_run("crash") as failed:
        raise RuntimeError("boom")
    assert tracker.client.get_run(failed.run_id).info.status == "FAILED"


def test_register_move_champion_and_rollback(tracker: Tracker, tmp_path: Path) -> None:
    name = policy_model_name(SCENARIO)
    assert tracker.get_alias(name, "champion") is None  # model does not exist yet
    v1, v2 = _register(tracker, tmp_path, 2)
    assert (v1, v2) == ("1", "2")
    assert tracker.model_version_tags(name, v2) == {"reward_fn_version": "v1", "i": "1"}
    assert tracker.model_version_source(name, v1).endswith("/policy")

    state = move_champion(tracker, name, v1)
    assert (state.champion, state.previous) == ("1", None)
    state = move_champion(tracker, name, v2)
    assert (state.champion, state.previous) == ("2", "1")
    assert tracker.aliases(name) == {"champion": "2", "previous": "1"}
    assert move_champion(tracker, name, v2).previous == "1"  # no-op when already champion

    state = rollback(tracker, name)
    assert (state.champion, state.previous) == ("1", None)
    assert tracker.aliases(name) == {"champion": "1"}
    assert tracker.model_version_tags(name, v2)["rlops.rolled_back"] == "true"
    with pytest.raises(TrackingError, match="no 'previous' alias"):
        rollback(tracker, name)
    with pytest.raises(TrackingError, match="v9"):
        move_champion(tracker, name, "9")
    assert tracker.aliases(name) == {"champion": "1"}

    # The registered artifact can be fetched back for serving.
    run_id = tracker.model_version_source(name, v1).split("/")[1]
    got = tracker.download_artifacts(run_id, "policy", tmp_path / "dl")
    assert (got / "policy.pt").read_bytes() == b"weights0"


def test_failed_alias_move_restores_prior_aliases(
    tracker: Tracker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = policy_model_name(SCENARIO)
    v1, v2, v3 = _register(tracker, tmp_path, 3)
    move_champion(tracker, name, v1)
    move_champion(tracker, name, v2)
    before = tracker.aliases(name)
    assert before == {"champion": "2", "previous": "1"}

    client = tracker.client
    real = client.set_registered_model_alias
    calls = {"n": 0}

    def flaky(model: str, alias: str, version: str) -> None:
        calls["n"] += 1
        if calls["n"] == 2:  # previous was already moved; now champion fails
            raise ConnectionError("registry went away")
        real(model, alias, version)

    monkeypatch.setattr(client, "set_registered_model_alias", flaky)

    with pytest.raises(TrackingError, match="restored to champion=2, previous=1"):
        move_champion(tracker, name, v3)
    monkeypatch.undo()
    assert tracker.aliases(name) == before


def test_unreachable_server_fails_fast_with_clear_error(tmp_tracking: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    params = load_params(overrides={"tracking": {"uri": url, "http_max_retries": 0}})
    remote = Tracker.from_params(params, SCENARIO)
    assert remote.artifact_root is None  # a local artifact folder is not pushed to a server
    t0 = time.monotonic()
    with pytest.raises(TrackingError) as info:
        move_champion(remote, policy_model_name(SCENARIO), "1")
    elapsed = time.monotonic() - t0
    msg = str(info.value)
    assert url in msg and "reachable" in msg
    with pytest.raises(TrackingError, match=url), remote.start_run("never"):
        pass
    # Bounded retries are scoped to the call: the environment is left as it was.
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
    print(f"unreachable server reported after {elapsed:.2f}s")


def test_reward_fn_registration_dedups_by_sha256(tracker: Tracker, tmp_path: Path) -> None:
    src = tmp_path / "reward_v1.py"
    src.write_text("def reward(batch):\n    return batch\n")
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    v = tracker.register_reward_fn(SCENARIO, src, sha, ["SLA_v3.2_4.1", "CREDIT_2.3"], "v1")
    assert tracker.register_reward_fn(SCENARIO, src, sha, ["SLA_v3.2_4.1"], "v1") == v
    name = reward_fn_model_name(SCENARIO)
    tags = tracker.model_version_tags(name, v)
    assert tags["sha256"] == sha and tags["rule_refs"] == "SLA_v3.2_4.1,CREDIT_2.3"
    assert tags["version_label"] == "v1"
    assert len(tracker.client.search_model_versions(f"name = '{name}'")) == 1

    src2 = tmp_path / "reward_v2.py"
    src2.write_text("def reward(batch):\n    return -batch\n")
    sha2 = hashlib.sha256(src2.read_bytes()).hexdigest()
    v2 = tracker.register_reward_fn(SCENARIO, src2, sha2, [], "v2")
    assert v2 != v and tracker.find_version_by_tag(name, "sha256", sha2) == v2
    run_id = tracker.model_version_source(name, v2).split("/")[1]
    got = tracker.download_artifacts(run_id, "reward_fn", tmp_path / "dl")
    assert (got / "reward_v2.py").read_text() == src2.read_text()
    with pytest.raises(TrackingError, match="does not exist"):
        tracker.register_reward_fn(SCENARIO, tmp_path / "missing.py", "0" * 64, [], "v9")


def test_rollback_walks_back_through_the_champion_history(tracker: Tracker, tmp_path: Path) -> None:
    name = policy_model_name(SCENARIO)
    v1, v2, v3, v4 = _register(tracker, tmp_path, 4)
    for v in (v1, v2, v3, v4):
        move_champion(tracker, name, v)
    assert tracker.aliases(name) == {"champion": v4, "previous": v3}
    state = rollback(tracker, name, reason="live return fell 0.2 below v3's")
    assert (state.champion, state.previous) == (v3, v2)  # previous is the next one back, not cleared
    assert tracker.model_version_tags(name, v4)["rlops.rolled_back.reason"] == "live return fell 0.2 below v3's"
    state = rollback(tracker, name)
    assert (state.champion, state.previous) == (v2, v1)  # further back, never forward to v4
    # A new promotion joins the history after the current champion; the demoted versions stay out.
    move_champion(tracker, name, v3)
    assert tracker.aliases(name) == {"champion": v3, "previous": v2}
    assert (rollback(tracker, name).champion, rollback(tracker, name).champion) == (v2, v1)
    with pytest.raises(TrackingError, match="no 'previous' alias"):
        rollback(tracker, name)
