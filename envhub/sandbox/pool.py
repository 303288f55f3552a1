"""A pool of pre-warmed sandboxes: episodes start without paying for sandbox creation.

Sandboxes are destroyed after use by default, and a fresh one is warmed in the background to take its
place; `recycle=True` instead wipes a used sandbox (processes killed, writable area emptied) and puts it
back. Creation is rate-capped so a burst of episodes cannot stampede the host. Nothing leaks when the
task holding a sandbox is cancelled or crashes: the lease's `async with` returns it on every exit path,
and `close()` reaps everything the pool ever handed out.

`envhub.sandbox.open("local")` with the default policy draws on spares of its own, not on a pool
(`envhub.sandbox.spares`): a spare, started ahead with its exec server running, is handed over for good,
and its replacement starts when it is closed or shortly after it was taken. A spare has never run
anything, and a sandbox handed out is never taken back, so nothing of one episode can reach another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any, Self

from envhub.sandbox.backends import Backend, create
from envhub.sandbox.base import Sandbox
from envhub.sandbox.cleanup import finish
from envhub.sandbox.policy import IsolationPolicy
from envhub.sandbox.results import SandboxError

log = logging.getLogger(__name__)


class SandboxPool:
    """Keeps `warm` sandboxes ready; at most `max_sandboxes` alive at once (idle and leased together)."""

    def __init__(
        self,
        warm: int = 2,
        *,
        backend: Backend = "local",
        policy: IsolationPolicy | None = None,
        image: str | None = None,
        max_sandboxes: int = 64,
        max_creates_per_s: float = 20.0,
        recycle: bool = False,
        **options: Any,
    ) -> None:
        if warm < 0 or max_sandboxes < 1 or warm > max_sandboxes:
            raise ValueError("need 0 <= warm <= max_sandboxes and max_sandboxes >= 1")
        if backend == "local":
            # Warm means ready to run: the exec server is started with the sandbox, not its first command.
            options = {"start_server": True, **options}
        self.warm = warm
        self.backend: Backend = backend
        self.policy = policy or IsolationPolicy()
        self.image = image
        self.recycle = recycle
        self._options = options
        self._interval = 1.0 / max_creates_per_s if max_creates_per_s > 0 else 0.0
        self._next_create = 0.0
        self._rate_lock = asyncio.Lock()
        self._capacity = asyncio.Semaphore(max_sandboxes)
        self._idle: asyncio.Queue[Sandbox] = asyncio.Queue()
        self._leased: set[Sandbox] = set()
        self._alive: set[Sandbox] = set()
        """Every sandbox counted against capacity, until destroyed."""
        self._background: set[asyncio.Task[None]] = set()
        self._closed = False
        self.created = 0
        self.last_error: BaseException | None = None

    async def start(self) -> None:
        """Warm the pool; waits until `warm` sandboxes are ready."""
        await asyncio.gather(*(self._add_idle() for _ in range(self.warm)))

    async def _create(self) -> Sandbox:
        async with self._rate_lock:
            loop = asyncio.get_running_loop()
            delay = self._next_create - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self._next_create = max(loop.time(), self._next_create) + self._interval
        sandbox = await create(self.backend, self.policy, self.image, dict(self._options))
        self.created += 1
        self._alive.add(sandbox)
        return sandbox

    async def _add_idle(self) -> None:
        await self._capacity.acquire()
        try:
            sandbox = await self._create()
        except BaseException:
            self._capacity.release()
            raise
        if self._closed:
            await self._destroy(sandbox)
        else:
            self._idle.put_nowait(sandbox)

    def _refill(self) -> None:
        """Warm a replacement in the background; failures are logged and kept in `last_error`."""
        warming = sum(not task.done() for task in self._background)  # a finished one leaves the set later
        if self._closed or self._idle.qsize() + warming >= self.warm:
            return

        async def refill() -> None:
            try:
                await self._add_idle()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = exc
                log.warning("could not warm a replacement sandbox: %s", exc)

        task = asyncio.create_task(refill())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def acquire(self) -> Sandbox:
        """A ready sandbox: a warm one if there is one, else a new one (waiting for capacity)."""
        if self._closed:
            raise SandboxError("the sandbox pool is closed")
        try:
            sandbox = self._idle.get_nowait()
        except asyncio.QueueEmpty:
            await self._capacity.acquire()
            try:
                sandbox = await self._create()
            except BaseException:
                self._capacity.release()
                raise
        self._leased.add(sandbox)
        self._refill()
        return sandbox

    def take_idle(self) -> Sandbox | None:
        """A warm sandbox handed over for good, or None if none is ready; either way a replacement warms.

        The pool no longer counts, recycles or closes a sandbox it handed over: its new owner closes it.
        """
        if self._closed:
            return None
        try:
            sandbox = self._idle.get_nowait()
        except asyncio.QueueEmpty:
            sandbox = None
        else:
            self._alive.discard(sandbox)
            self._capacity.release()
        self._refill()
        return sandbox

    async def release(self, sandbox: Sandbox, *, broken: bool = False) -> None:
        """Give a sandbox back: recycled if the pool recycles and it is healthy, else destroyed."""
        self._leased.discard(sandbox)
        if self.recycle and not broken and not self._closed and not sandbox.closed:
            try:
                await sandbox.reset()
            except Exception as exc:
                log.warning("could not recycle a sandbox, destroying it: %s", exc)
            else:
                self._idle.put_nowait(sandbox)
                return
        await self._destroy(sandbox)
        self._refill()

    async def _destroy(self, sandbox: Sandbox) -> None:
        if sandbox not in self._alive:
            return  # already destroyed (a release racing the pool's close)
        self._alive.discard(sandbox)
        try:
            await sandbox.close()
        finally:
            self._capacity.release()

    @contextlib.asynccontextmanager
    async def sandbox(self) -> AsyncIterator[Sandbox]:
        """Lease a sandbox for one episode; it goes back on every exit path, cancellation included."""
        sandbox = await self.acquire()
        broken = False
        try:
            yield sandbox
        except BaseException:
            broken = True  # state unknown after a crash or a cancel: never recycle it
            raise
        finally:
            await finish(self.release(sandbox, broken=broken))

    async def close(self) -> None:
        """Destroy every sandbox the pool holds or has leased out, and stop warming."""
        self._closed = True
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._leased.clear()
        while not self._idle.empty():
            self._idle.get_nowait()
        doomed = list(self._alive)
        await asyncio.gather(*(self._destroy(s) for s in doomed), return_exceptions=True)

    @property
    def idle(self) -> int:
        return self._idle.qsize()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def leased(self) -> int:
        return len(self._leased)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()
