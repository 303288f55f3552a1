"""The one websocket client connection both remote-env clients use: envhub's `ws://` client
(`envhub.serve.client`) and the OpenEnv format client (`envhub.integrations.openenv.env`).

One place opens the socket (headers and token, the message cap, the open timeout, the retries of a
connection an `envhub serve` door closed), sends a frame and reads its answer (the reply timeout), and
turns what the transport does into the contract's errors: a server that cannot be reached or drops the
connection is an `InfrastructureError`, and a server that answers the upgrade with an HTTP status is a
`Refused` carrying it, for the caller's protocol to read. Built on the `websockets` library.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass

try:
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidMessage, InvalidStatus
except ImportError as exc:  # the registry loads the clients for any URL or openenv: id
    raise ImportError(f"remote envs need the serve extra: pip install 'envhub-core[serve]' ({exc})") from exc

from envhub.core import InfrastructureError

MAX_MESSAGE_BYTES = 64 * 2**20
"""The largest message a client reads (64 MiB): a server's larger frame ends the connection, as an
`InfrastructureError` that names this cap, for envhub's and OpenEnv's clients alike."""

OPEN_TIMEOUT_SECONDS = 30.0
"""How long opening the socket (TCP, TLS, the upgrade) may take before the server counts as unreachable."""

DOOR_RETRIES = 4
"""Retries (0.1, 0.2, 0.4, 0.8 s apart) of a connection closed at the door before any answer (an `envhub
serve` whose connections, or this address's pending ones, are all in use: envhub.serve.doors)."""

_TOO_BIG = 1009  # the websocket close code of a message over the reader's cap


@dataclass
class Refused(Exception):
    """The server answered the websocket upgrade with an HTTP status instead of a session."""

    status: int
    reason: str
    body: bytes

    def __str__(self) -> str:
        said = self.body.decode(errors="replace").strip()[:300]
        return f"the server refused the connection: HTTP {self.status} {self.reason}" + (
            f": {said}" if said else ""
        )


class Connection:
    """One open websocket: one frame out, its answer back, the transport's failures as the contract's."""

    def __init__(self, socket: ClientConnection, url: str) -> None:
        self.socket, self.url = socket, url

    @classmethod
    async def open(
        cls,
        url: str,
        headers: dict[str, str],
        *,
        retry_refused: Callable[[Refused], bool] | None = None,
        what: str = "the env server",
    ) -> Connection:
        """Connect to `url`, retrying a connection closed at the door (and a refusal `retry_refused` says
        is the door's, not the protocol's) up to `DOOR_RETRIES` times."""
        unreachable = f"could not connect to {what} at {url}"
        for attempt in range(DOOR_RETRIES + 1):
            last = attempt == DOOR_RETRIES
            try:
                socket = await connect(
                    url,
                    additional_headers=headers,
                    max_size=MAX_MESSAGE_BYTES,
                    open_timeout=OPEN_TIMEOUT_SECONDS,
                )
                return cls(socket, url)
            except InvalidStatus as exc:  # the server answered the upgrade: its status and body say why
                response = exc.response
                refused = Refused(response.status_code, response.reason_phrase, bytes(response.body or b""))
                if retry_refused is None or not retry_refused(refused) or last:
                    raise refused from exc
            except (ConnectionResetError, InvalidMessage) as exc:  # closed at the door, unread 503 and all
                if last:
                    raise InfrastructureError(f"{unreachable}: {exc}") from exc
            except (OSError, InvalidHandshake, TimeoutError) as exc:
                raise InfrastructureError(f"{unreachable}: {exc}") from exc
            await asyncio.sleep(0.1 * 2**attempt)  # the server's doors were full for a moment: retry later
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def ask(self, text: str, *, reply_seconds: float | None = None) -> str:
        """Send one frame and read the next; a frame the server sent just before it closed is still read
        (a server may refuse so), and a dropped connection, no answer within `reply_seconds` or an answer
        over the cap is an `InfrastructureError`."""
        try:
            await self.socket.send(text)
            reply = await asyncio.wait_for(self.socket.recv(), reply_seconds)
        except (ConnectionClosed, OSError, TimeoutError) as exc:
            last_words = await self._last_words() if isinstance(exc, ConnectionClosed) else None
            if last_words is not None:
                return last_words
            raise InfrastructureError(self._dropped(exc)) from exc
        return reply if isinstance(reply, str) else reply.decode()

    async def close(self, farewell: str | None = None) -> None:
        """Say `farewell` (the protocol's close frame) and close; a socket already gone needs nothing."""
        with contextlib.suppress(ConnectionClosed, OSError):
            if farewell is not None:
                await self.socket.send(farewell)
            await self.socket.close()

    async def _last_words(self) -> str | None:
        try:
            message = await self.socket.recv()  # closed: a frame it kept, or ConnectionClosed now
        except (ConnectionClosed, OSError):
            return None
        return message if isinstance(message, str) else message.decode()

    def _dropped(self, exc: BaseException) -> str:
        closes = (exc.sent, exc.rcvd) if isinstance(exc, ConnectionClosed) else ()
        if any(close is not None and close.code == _TOO_BIG for close in closes):
            return (
                f"{self.url} sent a message over the client's cap of {MAX_MESSAGE_BYTES // 2**20} MiB "
                "(envhub.websocket.MAX_MESSAGE_BYTES) and the connection was closed; the episode is lost"
            )
        return (
            f"the connection to {self.url} dropped mid-episode ({type(exc).__name__}: {exc}); the "
            "episode is lost, play it again"
        )
