"""The tracking server down: the pages that read the registry answer at once with a 503 page naming
the server (never hang on MLflow's retries, never a 500 with a traceback), and the next ones fail
fast without asking again within the retry window."""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import pytest

S = "credit_approval"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(monkeypatch: pytest.MonkeyPatch, tracking_uri: str) -> Any:
    from fastapi.testclient import TestClient

    from rlops.console.app import create_app
    from rlops.console.data import ProjectData

    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri)
    data = ProjectData(registry_ttl_s=0.0)
    return TestClient(create_app(data, mlflow_ui="http://127.0.0.1:5000"), raise_server_exceptions=False), data


def test_a_tracking_server_that_does_not_answer_is_a_503_page_at_once(
    rlops_home: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _closed_port()
    client, data = _client(monkeypatch, f"http://127.0.0.1:{port}")
    asked: list[int] = []
    original = data._client
    monkeypatch.setattr(data, "_client", lambda scenario: asked.append(1) or original(scenario))
    with caplog.at_level(logging.WARNING):
        page = client.get(f"/s/{S}/promotion")
    assert page.status_code == 503, page.text[:500]
    assert f"127.0.0.1:{port}" in page.text and "does not answer" in page.text
    assert "Traceback" not in caplog.text
    first = len(asked)
    again = client.get(f"/s/{S}/promotion")
    assert again.status_code == 503 and len(asked) == first  # not asked again within the retry window
