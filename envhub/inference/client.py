"""One HTTP client for model servers: JSON requests retried with backoff, honouring `Retry-After`.

Servers under rollout load fail in ordinary ways (rate limits, 5xx while a replica restarts, slow
answers). Those are retried with jittered exponential backoff, or after the wait a server asks for;
everything else comes back to the caller at once, which knows what to tell its user about it. The
policy server client and the reward model client share this one, so they retry alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

CONNECTIONS_PER_POOL = 32
"""The most connections one httpx pool holds. httpcore's pool scans all its connections, and for each
waiting request all of them again, whenever a request starts or ends: one pool of thousands of
connections, or with thousands of requests waiting, spends its time scanning (1,000 concurrent
episodes through one pool slowed to ~10 steps/s). So requests wait for a free connection in a queue
of our own, and each connection slot belongs to one of many small pools."""

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
    connection slots, and the `max_connections` are split over pools of at most
    `CONNECTIONS_PER_POOL`, so that thousands of concurrent requests do not stall in httpx's
    bookkeeping.
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
        """
        failures: list[Failure] = []
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    try:
                        return await self._post_once(url, body)
                    except _Transient as exc:
                        failures.append(exc.failure)
                        raise
        except _Transient:
            raise ServerGaveUp(url, failures) from None
        raise AssertionError("unreachable: tenacity either returns, retries or re-raises")

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _Transient) and exc.failure.retry_after is not None:
            return min(exc.failure.retry_after, self.max_backoff)
        exponential = self.backoff * 2.0 ** (state.attempt_number - 1)
        return min(self.max_backoff, exponential + random.uniform(0, self.backoff))

    async def _post_once(self, url: str, body: object) -> httpx.Response:
        try:
            async with self._slot() as client:
                response = await client.post(url, json=body)
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
        """A free connection slot of this event loop's pools (made on first use), held for one request."""
        loop = asyncio.get_running_loop()
        pools = self._pools.get(loop)
        if pools is None:
            pools = self._pools[loop] = _Pools(self._pool_sizes(), self.headers, self.timeout)
        return pools.slot()

    def _pool_sizes(self) -> list[int]:
        """`max_connections` split as evenly as can be over pools of at most CONNECTIONS_PER_POOL."""
        count = math.ceil(self.max_connections / CONNECTIONS_PER_POOL)
        return [self.max_connections // count + (i < self.max_connections % count) for i in range(count)]

    async def close(self) -> None:
        """Close this event loop's connections (and forget other loops', which closed with their loops)."""
        pools = self._pools.pop(asyncio.get_running_loop(), None)
        self._pools.clear()
        if pools is not None:
            await asyncio.gather(*(client.aclose() for client in pools.clients))


class _Pools:
    """One event loop's httpx clients, and a slot for each connection they may hold.

    A request takes a slot before it reaches httpx, so no pool ever has a request waiting, and gives
    it back after; the slot given back last is taken first, so a light load keeps reusing the same
    warm connections instead of opening one in every pool.
    """

    def __init__(self, sizes: list[int], headers: dict[str, str], timeout: float) -> None:
        tls = httpx.create_ssl_context()  # one for all: each costs ~40 ms of reading CA certificates
        self.clients = [
            httpx.AsyncClient(
                verify=tls,
                headers=headers,
                timeout=httpx.Timeout(timeout, pool=None),
                limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
            )
            for size in sizes
        ]
        self.free: asyncio.LifoQueue[httpx.AsyncClient] = asyncio.LifoQueue()
        for client, size in zip(self.clients, sizes, strict=True):
            for _ in range(size):
                self.free.put_nowait(client)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[httpx.AsyncClient]:
        client = await self.free.get()
        try:
            yield client
        finally:
            self.free.put_nowait(client)
