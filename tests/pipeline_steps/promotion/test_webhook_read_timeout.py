"""The webhook receiver as ``rlops model webhook serve`` starts it drops a delivery that stalls half
sent once ``promotion.webhook.read_timeout_s`` has passed; before, such a connection stayed open."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import uvicorn
import yaml

from tests.common.test_http_server import TIMEOUT_S, captured_server, closed_after


def test_the_receiver_drops_a_delivery_that_stalls_half_sent(
    rlops_home: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from rlops.pipeline_steps.promotion.webhook import serve

    path = rlops_home / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params["promotion"]["webhook"].update(read_timeout_s=TIMEOUT_S, state_db=str(rlops_home / "webhook.db"))
    path.write_text(yaml.safe_dump(params))
    monkeypatch.setenv("RLOPS_WEBHOOK_SECRET", "s3cret")
    started: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.update(app=app, **kw))
    assert serve("127.0.0.1", 0) == 0
    with captured_server(started) as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b'POST /mlflow/webhook HTTP/1.1\r\nHost: rlops\r\nContent-Length: 400\r\n\r\n{"entity": "model_')
        waited, got = closed_after(conn)
    assert got == b"", got
    logged = capfd.readouterr().err
    assert "Traceback" not in logged and "ClientDisconnect" not in logged, logged[-2000:]
