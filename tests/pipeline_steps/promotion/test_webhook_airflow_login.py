"""The receiver in ``airflow`` mode reaches the Airflow the stack names (``RLOPS_AIRFLOW_URL``) and logs
in with the stack's credentials file: its token is fetched and renewed, never a fixed one that
expires a day after the receiver started."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlops.common.config import load_params
from rlops.pipeline_steps.promotion.webhook_events import trigger_promotion_dag
from rlops.pipeline_steps.promotion.webhook_settings import WebhookSettings


@pytest.fixture()
def airflow() -> Iterator[tuple[str, list[dict[str, object]]]]:
    seen: list[dict[str, object]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            if self.path == "/auth/token":
                answer, code = {"access_token": "tok-1"}, 201
            elif self.headers.get("Authorization") != "Bearer tok-1":
                answer, code = {"detail": "unauthorized"}, 401
            else:
                answer, code = {"dag_run_id": f"manual__{len(seen)}"}, 200
            raw = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()


def test_the_receiver_logs_in_with_the_stack_credentials(
    airflow: tuple[str, list[dict[str, object]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = airflow
    creds = tmp_path / "airflow-credentials.json"
    creds.write_text(json.dumps({"username": "admin", "password": "pw"}))
    monkeypatch.setenv("RLOPS_WEBHOOK_SECRET", "s")
    monkeypatch.setenv("RLOPS_AIRFLOW_URL", url)
    monkeypatch.setenv("RLOPS_AIRFLOW_CREDENTIALS", str(creds))
    monkeypatch.delenv("RLOPS_AIRFLOW_TOKEN", raising=False)
    settings = WebhookSettings.from_params(load_params(), mode="airflow")
    assert settings.airflow_url == url  # the stack's Airflow, not params' default localhost:8080
    conf = {"scenario": "credit_approval", "candidate": "3"}
    assert trigger_promotion_dag(settings, conf) and trigger_promotion_dag(settings, conf)
    logins = [s for s in seen if s["path"] == "/auth/token"]
    triggers = [s for s in seen if s["path"] == "/api/v2/dags/promote__credit_approval/dagRuns"]
    assert len(logins) == 1 and logins[0]["body"] == {"username": "admin", "password": "pw"}
    assert len(triggers) == 2 and all(t["auth"] == "Bearer tok-1" for t in triggers)
    assert triggers[0]["body"] == {"logical_date": None, "conf": conf}
