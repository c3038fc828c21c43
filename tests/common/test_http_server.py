"""The read deadline of the console's and the webhook receiver's HTTP server: a connection whose
request does not arrive whole in time is closed, a whole request is answered however long the app
takes, on either of uvicorn's parsers."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn

from rlops.common.errors import UserError
from rlops.common.http_server import read_timeout, read_timeout_protocol

TIMEOUT_S = 0.5
# Enough for a loaded machine to notice the deadline, far below "never".
SLACK_S = 3.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the whole body (as the webhook does), waits ``?sleep`` seconds, answers with its length;
    a websocket gets its messages echoed."""
    if scope["type"] == "websocket":
        while (message := await receive())["type"] != "websocket.disconnect":
            if message["type"] == "websocket.connect":
                await send({"type": "websocket.accept"})
            else:
                await send({"type": "websocket.send", "text": message.get("text") or ""})
        return
    if scope["type"] != "http":
        return
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    query = scope.get("query_string", b"").decode()
    if query.startswith("sleep="):
        await asyncio.sleep(float(query[len("sleep=") :]))
    body = str(size).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]}
    )
    await send({"type": "http.response.body", "body": body})


@contextmanager
def running(h11: bool) -> Iterator[int]:
    port = free_port()
    protocol = read_timeout_protocol(TIMEOUT_S, h11=h11)
    with _serving(uvicorn.Config(echo_app, host="127.0.0.1", port=port, log_level="warning", http=protocol)):
        yield port


@contextmanager
def captured_server(started: dict[str, Any]) -> Iterator[int]:
    """Serve what a command handed ``uvicorn.run`` (``started``: its app and keywords, captured by a
    stand-in) on a free port, with the HTTP protocol and settings the command chose."""
    kwargs = {k: v for k, v in started.items() if k != "app"}
    port = free_port()
    with _serving(uvicorn.Config(started["app"], **{**kwargs, "port": port})):
        yield port


@contextmanager
def _serving(config: uvicorn.Config) -> Iterator[None]:
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.02)
    try:
        yield
    finally:
        server.should_exit = True
        thread.join(10)


def closed_after(conn: socket.socket) -> tuple[float, bytes]:
    """Seconds until the server closes ``conn`` (reading what it sent meanwhile); fails when it stays open."""
    start = time.monotonic()
    conn.settimeout(TIMEOUT_S + SLACK_S)
    got = b""
    try:
        while chunk := conn.recv(4096):
            got += chunk
    except TimeoutError:
        pytest.fail(f"the server kept the connection open for {TIMEOUT_S + SLACK_S} s (read {got[:80]!r})")
    except ConnectionResetError:
        pass
    return time.monotonic() - start, got


PARSERS = pytest.mark.parametrize("h11", [False, True], ids=["auto", "h11"])
HALF_REQUESTS = {
    "nothing": b"",
    "half a head": b"POST /mlflow/webhook HTTP/1.1\r\nHost: rlops\r\nContent-Type: appl",
    "half a body": b'POST / HTTP/1.1\r\nHost: rlops\r\nContent-Length: 100\r\n\r\n{"entity": ',
}


@PARSERS
@pytest.mark.parametrize("sent", list(HALF_REQUESTS), ids=lambda s: s.replace(" ", "-"))
def test_a_half_sent_request_is_dropped_at_the_deadline(h11: bool, sent: str) -> None:
    with running(h11) as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(HALF_REQUESTS[sent])
        waited, got = closed_after(conn)
    assert got == b"" and waited < TIMEOUT_S + SLACK_S, (waited, got)


@PARSERS
def test_a_trickled_request_is_dropped_at_the_deadline_not_kept_alive_by_each_byte(h11: bool) -> None:
    head = b"GET / HTTP/1.1\r\nHost: rlops\r\nX-Padding: " + b"a" * 200
    with running(h11) as port, socket.create_connection(("127.0.0.1", port)) as conn:
        start = time.monotonic()
        try:
            for byte in head:
                conn.sendall(bytes([byte]))
                time.sleep(TIMEOUT_S / 5)
        except (BrokenPipeError, ConnectionResetError):
            pass
        else:
            pytest.fail("the server was still reading after 40 trickled bytes")
    assert time.monotonic() - start < TIMEOUT_S + SLACK_S


@PARSERS
def test_whole_requests_are_answered_however_long_the_app_takes_then_the_idle_connection_is_closed(
    h11: bool,
) -> None:
    request = b"POST /?sleep=%g HTTP/1.1\r\nHost: rlops\r\nContent-Length: 5\r\n\r\nhello" % (3 * TIMEOUT_S)
    with running(h11) as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.settimeout(3 * TIMEOUT_S + SLACK_S)
        for _ in range(2):  # the second on the same kept-alive connection
            conn.sendall(request)
            answer = conn.recv(4096)
            assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\r\n\r\n5"), answer
        waited, got = closed_after(conn)
    assert got == b"" and waited < TIMEOUT_S + SLACK_S


def test_an_upgraded_websocket_is_not_cut_at_the_read_deadline() -> None:
    from websockets.sync.client import connect

    with running(h11=False) as port, connect(f"ws://127.0.0.1:{port}/", open_timeout=10) as ws:
        time.sleep(3 * TIMEOUT_S)
        ws.send("still here")
        assert ws.recv(timeout=10) == "still here"


@pytest.mark.parametrize("value", [0, -1, "ten", float("nan"), float("inf"), None])
def test_a_read_timeout_must_be_a_positive_number_of_seconds(value: Any) -> None:
    with pytest.raises(UserError, match="expected a positive number of seconds"):
        read_timeout(value, "--read-timeout")
