"""The console as ``rlops console`` starts it drops a request that stalls half sent once
``--read-timeout`` seconds have passed; before, such a connection stayed open."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from tests.common.test_http_server import TIMEOUT_S, captured_server, closed_after


def test_the_console_drops_a_request_that_stalls_half_sent(
    rlops_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlops.cli import main

    started: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: started.update(app=app, **kw))
    assert main(["console", "--port", "8765", "--read-timeout", str(TIMEOUT_S)]) == 0
    with captured_server(started) as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET /runs HTTP/1.1\r\nHost: rlops\r\nCookie: ")
        waited, got = closed_after(conn)
    assert got == b"", got


def test_a_read_timeout_that_is_not_a_positive_number_is_bad_input(
    rlops_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlops.cli import main

    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: pytest.fail("started with a bad --read-timeout"))
    assert main(["console", "--read-timeout", "0"]) == 2
    err = capsys.readouterr().err
    assert "--read-timeout" in err and "positive number of seconds" in err and "Traceback" not in err, err
