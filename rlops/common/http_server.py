"""Serving an ASGI app (the console, the webhook receiver) with a bound on how long a request may
take to arrive.

uvicorn times out only an idle keep-alive connection, and only once a response was sent: a client
that connects and sends nothing, or half a request's head, or half its body, and then stalls holds
its connection (and, for a half body, the handler awaiting it) for as long as it likes; enough of
them exhaust the server's sockets. :func:`serve` runs uvicorn with a protocol that closes a
connection whose request has not arrived whole ``read_timeout_s`` after the server began waiting
for it (the connection opened, or the previous response went out). It is a deadline, not an idle
timer, so a client that trickles a byte every few seconds is closed as well. While a whole request
is being handled nothing is timed: the app's own work takes as long as it needs.

uvicorn is imported here at the top: import this module where a server starts, not where a command
is only parsed.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from rlops.common.errors import UserError

DEFAULT_READ_TIMEOUT_S = 10.0
log = logging.getLogger(__name__)


class _ReadDeadline(asyncio.Protocol):
    """The deadline, over one of uvicorn's HTTP/1.1 protocols (see :func:`read_timeout_protocol`)."""

    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    cycle: Any  # uvicorn's request-response cycle of the latest request; None before the first
    client: tuple[str, int] | None
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _waiting(self) -> bool:
        """Whether the server waits on the client for a request's bytes: no request yet, a body
        not whole, or the last request answered (the next one has not arrived whole)."""
        cycle = self.cycle
        return cycle is None or bool(cycle.more_body) or bool(cycle.response_complete)

    def _watch(self) -> None:
        if self.transport.is_closing() or not self._waiting():
            self._disarm()
        elif self._deadline is None:
            self._deadline = self.loop.call_later(self.read_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        # A connection upgraded to a websocket is its new protocol's to time, not ours.
        if not self.transport.is_closing() and self.transport.get_protocol() is self:
            who = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.info("closed the connection of %s: no whole request within %g s", who, self.read_timeout_s)
            self.transport.close()


class _H11ReadDeadline(_ReadDeadline, H11Protocol):
    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()


def _auto_base(h11: bool) -> type[_ReadDeadline]:
    """The protocol uvicorn's ``auto`` picks (httptools when installed, else h11), with the deadline."""
    if h11:
        return _H11ReadDeadline
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is optional: uvicorn serves with h11 then
        return _H11ReadDeadline

    class _HttpToolsReadDeadline(_ReadDeadline, HttpToolsProtocol):
        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch()

    return _HttpToolsReadDeadline


def read_timeout_protocol(read_timeout_s: float = DEFAULT_READ_TIMEOUT_S, h11: bool = False) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (its ``http=``) that closes a connection whose request has not
    arrived whole within ``read_timeout_s`` seconds (``h11``: the pure-Python parser even where
    httptools is installed)."""
    seconds = read_timeout(read_timeout_s, "read_timeout_s")
    base = _auto_base(h11)
    return type(base.__name__.lstrip("_"), (base,), {"read_timeout_s": seconds})


def read_timeout(value: Any, where: str) -> float:
    """A read timeout as a positive, finite number of seconds; anything else is bad input."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UserError(
            f"{where} {value!r}: expected a positive number of seconds (default {DEFAULT_READ_TIMEOUT_S:g})"
        )
    return seconds


def without_disconnect_tracebacks(app: Any) -> Any:
    """``app``, whose handlers reading the body of a client that left (or was dropped at the
    deadline) half-way end quietly: uvicorn would log the handler's ``ClientDisconnect`` as a
    traceback, and there is nobody left to answer."""
    from starlette.requests import ClientDisconnect

    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        except ClientDisconnect:
            log.info("a client left before its request arrived whole: %s %s", scope.get("method"), scope.get("path"))

    return asgi


def serve(app: Any, host: str, port: int, log_level: str, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> None:
    """Serve ``app`` until interrupted, as ``uvicorn.run`` does (exit 3 when it cannot start), its
    connections waiting at most ``read_timeout_s`` for a request."""
    protocol = read_timeout_protocol(read_timeout_s)
    uvicorn.run(without_disconnect_tracebacks(app), host=host, port=int(port), log_level=log_level, http=protocol)
