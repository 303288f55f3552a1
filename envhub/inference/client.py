"""One HTTP client for model servers: JSON requests retried with backoff, honouring `Retry-After`.

Servers under rollout load fail in ordinary ways (rate limits, 5xx while a replica restarts, slow
answers). Those are retried with jittered exponential backoff, or after the wait a server asks for;
everything else comes back to the caller at once, which knows what to tell its user about it. The
policy server client and the reward model client share this one, so they retry alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx

CONNECTIONS_PER_POOL = 1
"""The connections one httpx client (one httpcore pool) holds: one. httpcore's pool scans all its
connections whenever a request starts or ends, and for each idle one asks its socket whether it is still
readable (a `poll`, a `getpeername` and a dict of anyio attributes each time), so a request's cost grew
with the pool: 1,000 concurrent episodes ran at 184 steps/s over pools of 32 and 411 over pools of one
(docs/benchmarks.md). So requests wait for a free connection in a queue of our own, and each
connection is its own client."""

_READ = httpx.ByteStream(b"")
"""Stands for a response's stream once its body is read: httpx binds the stream to its response and
the response to the stream (a reference cycle of ~20 objects per request, down to httpcore's), which
only the cyclic GC would free; replacing the spent stream lets reference counting free them at once."""

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Answers that mean "try again later": rate limiting and an overloaded or restarting server."""


def bearer(token: str | None) -> dict[str, str]:
    """The `Authorization` header that carries `token`, or no header without one (a local server)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


@dataclass(frozen=True)
class Failure:
    """One attempt that is worth repeating; `kind` ("timeout", "unreachable" or the status) groups them."""

    kind: str
    detail: str
    retry_after: float | None = None


class _Transient(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.detail)
        self.failure = failure


class ServerGaveUp(Exception):
    """Every attempt failed in a way worth retrying; `failures` holds them in order."""

    def __init__(self, url: str, failures: list[Failure]) -> None:
        self.url = url
        self.failures = failures
        super().__init__(f"the server at {url} {self.summary()}")

    @property
    def last(self) -> Failure:
        return self.failures[-1]

    def summary(self) -> str:
        """`answered 503 (...) on all 4 attempts`, or each kind in order when they differ."""
        last, count = self.last, len(self.failures)
        if all(f.kind == last.kind for f in self.failures):
            return f"{last.detail} on all {count} attempts" if count > 1 else last.detail
        kinds = ", ".join(f.kind for f in self.failures)
        return f"failed {count} attempts ({kinds}); the last {last.detail}"


class RequestNotSent(Exception):
    """The request could not be sent at all (a malformed URL, an unsupported scheme): not retried."""


def snippet(body: str, limit: int = 300) -> str:
    """A response body for an error message: whitespace folded, cut to `limit` characters, quoted."""
    flat = " ".join(body.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")


def retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After: <seconds>` header; the HTTP-date form is rare and is not honoured."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and seconds >= 0 else None


class RetryingClient:
    """JSON POSTs to one server, retried `max_retries` times on timeouts, network errors and 429/5xx.

    The wait before attempt n is `backoff * 2**(n-1)` plus up to `backoff` of jitter (so episodes that
    failed together do not retry together), or the server's `Retry-After`; both are capped at
    `max_backoff`. httpx clients belong to the event loop that made them, so each loop gets its own; a
    request waits for a free connection without a time limit (the caller's concurrency bounds that
    wait, and a request must not time out before it was ever sent). That wait is in a queue of free
    connections of our own, each connection its own httpx client (`CONNECTIONS_PER_POOL`), so that
    thousands of concurrent requests do not stall in httpx's bookkeeping.
    """

    def __init__(
        self,
        *,
        timeout: float,
        max_retries: int,
        backoff: float,
        max_backoff: float,
        headers: dict[str, str] | None = None,
        max_connections: int = 100,
    ) -> None:
        if timeout <= 0 or max_retries < 0 or max_connections < 1 or backoff < 0 or max_backoff < 0:
            raise ValueError(
                "need timeout > 0, max_retries >= 0, max_connections >= 1, backoff >= 0 and "
                f"max_backoff >= 0; got {timeout}, {max_retries}, {max_connections}, {backoff} and "
                f"{max_backoff}"
            )
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.headers = dict(headers or {})
        self.max_connections = max_connections
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pools] = (
            weakref.WeakKeyDictionary()
        )

    async def post(self, url: str, body: object) -> httpx.Response:
        """The server's answer to `body` as JSON: any status but a retried one, after retrying those.

        Raises ServerGaveUp when every attempt failed transiently, RequestNotSent when it could not be sent.
        A plain loop, not tenacity: its `AsyncRetrying` made ~25 objects in reference cycles per request
        (a thread-local, a Future with its Condition and RLock), garbage only the cyclic GC frees, which
        with thousands of episodes in flight is what slowed the process (docs/benchmarks.md).
        """
        failures: list[Failure] = []
        while True:
            try:
                return await self._post_once(url, body)
            except _Transient as exc:
                failures.append(exc.failure)
            if len(failures) > self.max_retries:
                raise ServerGaveUp(url, failures)
            await asyncio.sleep(self._wait(len(failures), failures[-1]))

    def _wait(self, attempt: int, failure: Failure) -> float:
        """Seconds before the attempt after `attempt` (from 1), which failed with `failure`."""
        if failure.retry_after is not None:
            return min(failure.retry_after, self.max_backoff)
        exponential = self.backoff * 2.0 ** (attempt - 1)
        return min(self.max_backoff, exponential + random.uniform(0, self.backoff))

    async def _post_once(self, url: str, body: object) -> httpx.Response:
        try:
            async with self._slot() as client:
                response = await client.post(url, json=body)
            response.stream = _READ  # the read body is in `content`; this ends a cycle (see _READ)
        except httpx.TimeoutException as exc:
            detail = f"did not answer within {self.timeout} s ({type(exc).__name__})"
            raise _Transient(Failure("timeout", detail)) from exc
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            detail = f"could not be reached ({type(exc).__name__}: {exc or 'connection failed'})"
            raise _Transient(Failure("unreachable", detail)) from exc
        except httpx.HTTPError as exc:
            raise RequestNotSent(f"could not send a request to {url}: {type(exc).__name__}: {exc}") from exc
        code = response.status_code
        if code in RETRIED_STATUSES:
            detail = f"answered {code} (body: {snippet(response.text)})"
            raise _Transient(Failure(str(code), detail, retry_after(response.headers.get("retry-after"))))
        return response

    def _slot(self) -> contextlib.AbstractAsyncContextManager[httpx.AsyncClient]:
        """A free connection of this event loop's (made on first use), held for one request."""
        loop = asyncio.get_running_loop()
        pools = self._pools.get(loop)
        if pools is None:
            pools = self._pools[loop] = _Pools(self.max_connections, self.headers, self.timeout)
        return pools.slot()

    async def close(self) -> None:
        """Close this event loop's connections (and forget other loops', which closed with their loops)."""
        pools = self._pools.pop(asyncio.get_running_loop(), None)
        self._pools.clear()
        if pools is not None:
            await asyncio.gather(*(client.aclose() for client in pools.clients))


class _Pools:
    """One event loop's connections, each its own httpx client, and a queue of the free ones.

    A request takes a free client before it reaches httpx, so no httpx pool ever has a request waiting
    or more than one connection to scan, and gives it back after; the client given back last is taken
    first, so a light load keeps reusing the same warm connections. Clients are made when first needed,
    so `max_connections` costs nothing until the load asks for that many.
    """

    def __init__(self, size: int, headers: dict[str, str], timeout: float) -> None:
        self.headers, self.timeout = headers, timeout
        self.tls: ssl.SSLContext | None = None
        self.clients: list[httpx.AsyncClient] = []
        self.free: asyncio.LifoQueue[httpx.AsyncClient | None] = asyncio.LifoQueue()
        for _ in range(size):
            self.free.put_nowait(None)  # a connection not made yet

    def _client(self) -> httpx.AsyncClient:
        if self.tls is None:
            self.tls = httpx.create_ssl_context()  # one for all: each costs ~40 ms of reading CA certificates
        limits = httpx.Limits(
            max_connections=CONNECTIONS_PER_POOL, max_keepalive_connections=CONNECTIONS_PER_POOL
        )
        client = httpx.AsyncClient(
            verify=self.tls,
            headers=self.headers,
            timeout=httpx.Timeout(self.timeout, pool=None),
            limits=limits,
        )
        self.clients.append(client)
        return client

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[httpx.AsyncClient]:
        client = await self.free.get() or self._client()
        try:
            yield client
        finally:
            self.free.put_nowait(client)
