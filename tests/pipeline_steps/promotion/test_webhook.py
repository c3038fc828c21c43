"""Promotion from the MLflow UI, still gated — for real: an ``mlflow server`` (SQL backend) calls the
rlops receiver through a registered, HMAC-signed ``model_version_alias.created`` webhook when the
alias is set through MLflow's REST API (what the UI calls).

* ``challenger`` on a candidate that passes the gates → the champion moves to it;
* ``challenger`` on one that fails → the champion stays, the hand-set challenger is removed and the
  version's tags say why;
* ``champion`` set by hand → put back and re-gated (``promotion.manual_champion: regate``).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any

import pytest
import torch

from rlops.common.config import deep_merge, load_params
from rlops.pipeline_steps.infra.context import StepContext
from rlops.registry import tags as T
from tests.policy_kit import NAME, SCENARIO, approve_all_policy, cloned_rules_policy, credit_pack, register


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SECRET = "s3cret-shared-with-mlflow"
GATES = {
    "episodes": 500,
    "bootstrap_samples": 300,
    "latency_p99_ratio": 1000.0,
    "latency_samples": 30,
    "require_stress_test": False,
    "min_segment_episodes": 50,
    "segment_tolerance": 0.35,
}


@pytest.fixture(scope="module")
def pack() -> Any:
    return credit_pack()


def set_alias_via_rest(server: str, alias: str, version: str) -> None:
    """What the MLflow UI does when a user adds an alias to a version."""
    body = json.dumps({"name": NAME, "alias": alias, "version": version}).encode()
    req = urllib.request.Request(
        f"{server}/api/2.0/mlflow/registered-models/alias",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def wait_for_tag(ctx: StepContext, version: str, key: str, timeout_s: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tags = ctx.tracker.model_version_tags(NAME, version)
        if key in tags:
            return tags
        time.sleep(0.3)
    raise AssertionError(f"v{version} never got the tag {key}; tags: {ctx.tracker.model_version_tags(NAME, version)}")


def settled_aliases(ctx: StepContext, expected: dict[str, str], timeout_s: float = 30) -> dict[str, str]:
    """The model's aliases once they equal ``expected``, or as they stand after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    aliases = ctx.tracker.aliases(NAME)
    while aliases != expected and time.monotonic() < deadline:
        time.sleep(0.3)
        aliases = ctx.tracker.aliases(NAME)
    return aliases


@pytest.fixture()
def receiver(mlflow_server: str, pack: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The rlops receiver (embedded mode) on 127.0.0.1, registered as MLflow's webhook."""
    import uvicorn

    from rlops.pipeline_steps.promotion.webhook import create_app
    from rlops.pipeline_steps.promotion.webhook_settings import WebhookSettings
    from rlops.registry.webhooks import register_webhook

    monkeypatch.setattr(StepContext, "pack_with", lambda self, calibration: pack)
    monkeypatch.setenv("RLOPS_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("RLOPS_STORAGE_ROOT", f"file://{tmp_path / 'storage'}")
    monkeypatch.delenv("RLOPS_ARTIFACT_ROOT", raising=False)
    torch.set_num_threads(1)
    params = load_params(
        overrides={
            "tracking": {"uri": mlflow_server, "artifact_root": None, "http_max_retries": 0},
            "evaluate": GATES,
            "promotion": {"manual_champion": "regate"},
            "ope": {"required": False},  # no live traffic in this world: the sandbox's gates decide
        }
    )
    params["evaluate"] = deep_merge(params["evaluate"], GATES)

    def context_for(scenario: str) -> StepContext:
        return StepContext.create(scenario, "20261130T1200", params=params)

    app = create_app(params, WebhookSettings.from_params(params), context_for=context_for)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    register_webhook(mlflow_server, f"http://127.0.0.1:{port}/mlflow/webhook", SECRET)
    yield context_for(SCENARIO), app
    server.should_exit = True
    thread.join(timeout=10)


def test_aliases_set_in_the_ui_go_through_the_gates(
    mlflow_server: str, receiver: Any, pack: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="rlops.pipeline_steps.promotion.webhook")
    ctx, app = receiver
    bad = register(ctx, pack, approve_all_policy(pack))
    ctx.tracker.set_alias(NAME, "champion", bad)  # rlops' own champion (recorded)
    good = register(ctx, pack, cloned_rules_policy(pack))

    # a candidate that passes the gates: the champion moves
    set_alias_via_rest(mlflow_server, "challenger", good)
    tags = wait_for_tag(ctx, good, T.PROMOTION_OUTCOME)
    assert tags[T.PROMOTION_OUTCOME] == "champion", tags
    assert tags[T.PROMOTION_REQUESTED_BY] == "mlflow-ui-alias"
    # the hand-set challenger is retired: under load a second delivery of the same MLflow event can
    # still be in flight when the outcome tag lands, so the registry gets a few seconds to settle
    assert settled_aliases(ctx, {"champion": good, "previous": bad}) == {"champion": good, "previous": bad}
    assert "Gates (" in ctx.tracker.version_description(NAME, good)  # the gate summary, for the UI

    # a candidate that fails: the champion stays, the hand-set challenger goes, the tags say why
    worse = register(ctx, pack, approve_all_policy(pack))
    set_alias_via_rest(mlflow_server, "challenger", worse)
    tags = wait_for_tag(ctx, worse, T.PROMOTION_OUTCOME)
    assert tags[T.PROMOTION_OUTCOME] == "rejected"
    assert "mean_return" in tags[T.PROMOTION_REASON] and "champion unchanged" in tags[T.PROMOTION_REASON]
    assert tags[T.VERSION.EVAL_PASSED] == "false"
    assert ctx.tracker.aliases(NAME) == {"champion": good, "previous": bad}
    assert "FAILED" in ctx.tracker.version_description(NAME, worse)
    # the receiver's log says each gated decision in one line: version, verdict, failing gates
    decisions = [r.getMessage() for r in caplog.records if r.getMessage().startswith("webhook decision:")]
    assert any(f"{NAME} v{good} alias challenger → champion; failing gates: none" in d for d in decisions), decisions
    assert any(f"{NAME} v{worse} alias challenger → rejected; failing gates: mean_return" in d for d in decisions), (
        decisions
    )

    # a champion set by hand: put back at once, then re-gated (and it fails the gates)
    set_alias_via_rest(mlflow_server, "champion", worse)
    tags = wait_for_tag(ctx, worse, T.MANUAL_CHAMPION)
    assert tags[T.MANUAL_CHAMPION] == "regated"
    assert f"set to v{worse} outside rlops" in tags[T.MANUAL_CHAMPION_REASON]
    deadline = time.monotonic() + 30
    while ctx.tracker.model_version_tags(NAME, worse).get(T.PROMOTION_REQUESTED_BY) != "manual-champion":
        assert time.monotonic() < deadline, "the hand-set champion was never re-gated"
        time.sleep(0.3)
    assert ctx.tracker.get_alias(NAME, "champion") == good


def test_unsigned_or_forged_deliveries_are_refused(receiver: Any) -> None:
    from fastapi.testclient import TestClient

    from rlops.pipeline_steps.promotion.webhook_signature import sign

    _, app = receiver
    client = TestClient(app)
    body = json.dumps(
        {
            "entity": "model_version_alias",
            "action": "created",
            "data": {"name": NAME, "alias": "challenger", "version": "1"},
        }
    ).encode()
    ts = str(int(time.time()))
    assert client.post("/mlflow/webhook", content=body).status_code == 401
    forged = {
        "X-MLflow-Signature": sign("wrong", "d1", ts, body),
        "X-MLflow-Timestamp": ts,
        "X-MLflow-Delivery-Id": "d1",
    }
    assert client.post("/mlflow/webhook", content=body, headers=forged).status_code == 401
    old = str(int(time.time()) - 3600)
    replay = {
        "X-MLflow-Signature": sign(SECRET, "d2", old, body),
        "X-MLflow-Timestamp": old,
        "X-MLflow-Delivery-Id": "d2",
    }
    assert client.post("/mlflow/webhook", content=body, headers=replay).status_code == 401
    other = json.dumps({"entity": "model_version", "action": "created", "data": {}}).encode()
    ok = {"X-MLflow-Signature": sign(SECRET, "d3", ts, other), "X-MLflow-Timestamp": ts, "X-MLflow-Delivery-Id": "d3"}
    assert client.post("/mlflow/webhook", content=other, headers=ok).json()["accepted"] is False
