"""The server's doors: how many connections it holds, from whom, and for how long before they earn a session.

A connection is *pending* from the moment it is accepted until its session is authorised (the token
checked on the websocket upgrade, or, with no token configured, the session's first frame): HTTP
requests, half-sent headers, websockets before `open`. Pending connections are what a client without
the token can hold, so they are the ones capped and timed:

- `max_connections`: every connection at once, pending or not; one more is closed as it is accepted,
  so the server never runs out of descriptors for the clients it serves;
- `max_pending_per_client`: pending connections from one peer address, at most half of
  `max_connections`, so one address cannot hold the doors that others need;
- `header_timeout`: seconds to send a request's headers (a slowloris is dropped);
- `open_max_bytes`: the largest websocket frame read before the session is authorised (a 60 MiB
  first frame is refused at its header, before its payload is buffered).

Written against uvicorn's own protocol classes (`H11Protocol`, `WebSocketsSansIOProtocol`) because the
limits must act below the ASGI app: half-sent headers never reach it, a descriptor is spent before it
sees anything, and uvicorn's options do not cover these (`limit_concurrency` answers 503 only once a
request's headers are in, counting connections the app has already admitted; `ws_max_size` is one cap
for every frame of every connection; there is no header-read timeout and no per-client limit). The
subclasses override `connection_made` and `connection_lost` only, plus one timer and the frame cap.
"""

from __future__ import annotations

import asyncio
import resource
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.utils import get_remote_addr
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from envhub.websocket import MAX_MESSAGE_BYTES

Peer = tuple[str, int]

CLOSE_TIMEOUT = 2.0
"""Seconds a websocket the server closes waits for the peer's close frame before the socket is cut
(uvicorn's is 10 s: a peer that never answers would hold a descriptor that long after each refusal)."""

_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%b"
)


@dataclass
class _Connection:
    host: str | None
    pending: bool = True
    socket: WebSocketsSansIOProtocol | None = None


@dataclass
class Doors:
    """The connection limits of one server, and what they refused (the counters `/metrics` shows)."""

    max_connections: int = 1024
    max_pending_per_client: int = 256
    header_timeout: float = 10.0
    open_max_bytes: int = 64 * 2**10
    frame_max_bytes: int = MAX_MESSAGE_BYTES
    """The frame cap once a session is authorised (uvicorn's `ws_max_size`): the clients' one cap."""
    counts: Counter[str] = field(default_factory=Counter)
    _live: dict[int, _Connection] = field(default_factory=dict)
    _by_peer: dict[Peer, _Connection] = field(default_factory=dict)
    _pending: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_pending_per_client", "open_max_bytes", "frame_max_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.header_timeout <= 0:
            raise ValueError(f"--header-timeout must be positive, got {self.header_timeout}")

    @classmethod
    def bounded(cls, max_connections: int, max_pending_per_client: int, **limits: Any) -> Doors:
        """Doors whose limits fit this process: at most half the descriptor limit in connections (the
        other half stays for what the sessions' envs open: files, sandboxes, model clients), and at
        most half of those pending from one address (so another address always finds a door)."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY:
            max_connections = max(1, min(max_connections, soft // 2))
        per_client = max(1, min(max_pending_per_client, max_connections // 2))
        return cls(max_connections=max_connections, max_pending_per_client=per_client, **limits)

    def admit(self, transport: asyncio.Transport) -> bool:
        """Whether a just-accepted connection may stay; a refused one is answered 503 and closed."""
        peer = get_remote_addr(transport)
        host = peer[0] if peer else None
        reason = None
        if len(self._live) >= self.max_connections:
            reason = f"the server holds {self.max_connections} connections (--max-connections)"
        elif host is not None and self._pending[host] >= self.max_pending_per_client:
            reason = (
                f"{host} holds {self.max_pending_per_client} connections not yet in a session "
                "(--max-pending-per-client)"
            )
        if reason is not None:
            self.counts["refused_connections"] += 1
            body = f"{reason}; retry later\n".encode()
            transport.write(_REFUSAL % (len(body), body))
            transport.close()
            return False
        connection = _Connection(host)
        self._live[id(transport)] = connection
        if peer is not None:
            self._by_peer[peer] = connection
        if host is not None:
            self._pending[host] += 1
        return True

    def upgraded(self, transport: asyncio.Transport, socket: WebSocketsSansIOProtocol) -> None:
        """The connection is a websocket now: its frames are capped at `open_max_bytes` until authorised."""
        connection = self._live.get(id(transport))
        if connection is not None:
            connection.socket = socket
            socket.conn.max_message_size = self.open_max_bytes

    def authorised(self, peer: Any) -> None:
        """The connection from `peer` (an ASGI scope's `client`) holds a session now: no longer pending,
        and its frames may be as large as a session's. Unknown peers (another ASGI server) are ignored."""
        connection = self._by_peer.get(tuple(peer)) if peer else None
        if connection is None or not connection.pending:
            return
        connection.pending = False
        self._unpend(connection.host)
        if connection.socket is not None:
            connection.socket.conn.max_message_size = self.frame_max_bytes

    def release(self, transport: asyncio.Transport, peer: Peer | None) -> None:
        connection = self._live.pop(id(transport), None)
        if connection is None:
            return
        if peer is not None and self._by_peer.get(peer) is connection:
            del self._by_peer[peer]
        if connection.pending:
            self._unpend(connection.host)

    def _unpend(self, host: str | None) -> None:
        if host is not None:
            self._pending[host] -= 1
            if self._pending[host] <= 0:
                del self._pending[host]  # an address seen once leaves no entry behind

    def protocols(self) -> tuple[type[H11Protocol], type[WebSocketsSansIOProtocol]]:
        """uvicorn's HTTP and websocket protocol classes, held to these doors."""
        doors = self

        class Socket(WebSocketsSansIOProtocol):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.close_timeout = CLOSE_TIMEOUT

            def connection_made(self, transport: Any) -> None:
                super().connection_made(transport)
                doors.upgraded(transport, self)

            def connection_lost(self, exc: Exception | None) -> None:
                super().connection_lost(exc)
                doors.release(self.transport, self.client)

        class HTTP(H11Protocol):
            deadline: asyncio.TimerHandle | None = None

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self.ws_protocol_class = Socket

            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                if doors.admit(transport):
                    self.arm()

            def connection_lost(self, exc: Exception | None) -> None:
                self.disarm()
                super().connection_lost(exc)
                doors.release(self.transport, self.client)

            def on_response_complete(self) -> None:
                super().on_response_complete()
                if not self.transport.is_closing():
                    self.arm()  # the next request's headers are timed too

            def arm(self) -> None:
                self.disarm()
                self.deadline = self.loop.call_later(doors.header_timeout, self.headers_late)

            def disarm(self) -> None:
                if self.deadline is not None:
                    self.deadline.cancel()
                    self.deadline = None

            def headers_late(self) -> None:
                """Close a connection whose request's headers are not all in (nor upgraded meanwhile)."""
                self.deadline = None
                waiting = self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE
                if waiting and self.transport.get_protocol() is self and not self.transport.is_closing():
                    doors.counts["header_timeouts"] += 1
                    self.transport.close()

        return HTTP, Socket
