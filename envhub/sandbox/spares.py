"""The started spares behind `envhub.sandbox.open("local")`: a cold open takes a ready sandbox and a fresh
one is prepared in the background. A spare is handed out once and never taken back.

The replacement for a spare taken starts just after that sandbox is closed, or REPLACE_AFTER_S after it
was taken if it is still open then: not at once, since building a sandbox takes tens of milliseconds of CPU
and would compete, for the host's cores and its event loop, with the very first commands of the episode
that took the spare. An open that finds no spare ready starts one at once, for the next open.

Above the backends: `open` asks here before it asks a backend, so the local backend itself knows nothing
of spares and no import runs back down into it.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import contextvars
import logging
import weakref
from collections.abc import Callable
from typing import Any

from envhub.sandbox.backends import create
from envhub.sandbox.base import Sandbox
from envhub.sandbox.policy import IsolationPolicy
from envhub.settings import settings, variable

log = logging.getLogger(__name__)

SPARES_ENV = variable("sandbox_spares")
"""How many started sandboxes `open("local")` keeps ready per event loop for the default policy (default
1, at most MAX_SPARES); 0 turns them off."""
MAX_SPARES = 8
REPLACE_AFTER_S = 0.1
"""How long after a spare is taken its replacement starts, if the episode has not closed it by then: the
episode's first commands (its set-up, usually) run on a host not busy building the next sandbox."""
START_DELAY_S = 0.01
"""How long a spare's making waits before it starts a process. Not at once: a program's last act is often
the close or open that asked for it, and a sandbox start begun in the event loop's last turn, cancelled
by asyncio.run's shutdown before asyncio connected the process's pipes, never hears of the process's exit
(Python 3.11): the program would hang. Cancelled while it waits, the making just stops."""
_spares: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Spares] = weakref.WeakKeyDictionary()
_guards: set[asyncio.Task[None]] = set()


def spare_count() -> int:
    return max(0, min(settings().sandbox_spares, MAX_SPARES))


async def take_spare(policy: IsolationPolicy) -> Sandbox | None:
    """A started local sandbox for `policy` if one is ready, else None (and then one starts warming).

    Only the default policy has spares: a spare is started before anyone asks, so its policy must be
    known then, and environments that declare their own limits open sandboxes of their own.
    """
    if policy != IsolationPolicy():
        return None
    count = spare_count()
    if count == 0:
        return None
    return _loop_spares(count).take()


def spares_idle() -> int:
    """How many started spares this event loop has ready for `open("local")` (the benchmark waits on it)."""
    spares = _spares.get(asyncio.get_running_loop())
    return 0 if spares is None or spares.closed else spares.idle


class Spares:
    """Up to `count` started local sandboxes of the default policy, made one at a time."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._ready: collections.deque[Sandbox] = collections.deque()
        self._warming: asyncio.Task[None] | None = None
        self._timers: set[asyncio.TimerHandle] = set()
        self._closed = False
        self.last_error: BaseException | None = None

    @property
    def idle(self) -> int:
        return len(self._ready)

    @property
    def closed(self) -> bool:
        return self._closed

    def take(self) -> Sandbox | None:
        """A ready spare handed over for good (its replacement comes later, see the module), or None."""
        if self._closed:
            return None
        if not self._ready:
            self.warm()
            return None
        sandbox = self._ready.popleft()
        self._replace_later(sandbox)
        return sandbox

    def _replace_later(self, sandbox: Sandbox) -> None:
        """Warm a replacement when `sandbox` closes or REPLACE_AFTER_S from now, whichever is first."""
        timer = asyncio.get_running_loop().call_later(REPLACE_AFTER_S, self._due, None)
        self._timers.add(timer)
        on_closed: Callable[[Callable[[], None]], None] = sandbox.on_closed  # type: ignore[attr-defined]
        on_closed(lambda: self._due(timer))

    def _due(self, timer: asyncio.TimerHandle | None) -> None:
        """A replacement is due: its timer fired (None), or the spare closed (its `timer`, cancelled)."""
        if timer is not None:
            timer.cancel()
        now = asyncio.get_running_loop().time()
        self._timers = {t for t in self._timers if not t.cancelled() and t.when() > now}  # those pending
        self.warm()

    def warm(self) -> None:
        """Start making a spare unless one is being made or enough are ready; each, once ready, starts
        the next while fewer than `count` are."""
        if self._closed or self._warming is not None or len(self._ready) >= self.count:
            return
        # A spare belongs to no episode: made in an empty context, it never joins the recording or the
        # replay of the episode whose open asked for it (a replay's would make it a replay stand-in).
        self._warming = asyncio.get_running_loop().create_task(
            self._make(), name="envhub sandbox spare", context=contextvars.Context()
        )

    async def _make(self) -> None:
        try:
            await asyncio.sleep(START_DELAY_S)
            sandbox = await create("local", IsolationPolicy(), None, {"start_server": True})
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # logged, and kept for whoever looks: open() makes its own sandboxes
            self.last_error = exc
            log.warning("could not start a spare sandbox: %s", exc)
            self._warming = None
            return
        self._warming = None
        if self._closed:
            await sandbox.close()
            return
        self._ready.append(sandbox)
        self.warm()

    async def close(self) -> None:
        """Close the ready spares and stop making new ones (spares handed out are their owners')."""
        self._closed = True
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        if self._warming is not None:
            self._warming.cancel()
            with contextlib.suppress(BaseException):
                await self._warming
        doomed = list(self._ready)
        self._ready.clear()
        await asyncio.gather(*(sandbox.close() for sandbox in doomed), return_exceptions=True)

    def abandon(self) -> None:
        """Free the ready spares without an event loop (it is gone): processes, scratch and slot."""
        self._closed = True
        while self._ready:
            abandon: Any = getattr(self._ready.popleft(), "abandon", None)  # local sandboxes have it
            if abandon is not None:
                with contextlib.suppress(Exception):  # best effort at exit: the next process sweeps the rest
                    abandon()


def _loop_spares(count: int) -> Spares:
    """This event loop's spares: made on first use, and closed when the loop shuts down (asyncio.run and
    every asyncio.Runner cancel what is still pending then, which ends the guard task below)."""
    loop = asyncio.get_running_loop()
    spares = _spares.get(loop)
    if spares is not None and not spares.closed:
        return spares
    for other, stale in list(_spares.items()):
        if other.is_closed():  # closed without shutting down its tasks: clean up what it left
            stale.abandon()
            del _spares[other]
    spares = Spares(count)
    _spares[loop] = spares
    guard = loop.create_task(_guard(spares), name="envhub sandbox spares")
    _guards.add(guard)
    guard.add_done_callback(_guards.discard)
    return spares


async def _guard(spares: Spares) -> None:
    """Wait until cancelled (the loop is shutting down), then close the spares."""
    try:
        await asyncio.Event().wait()
    finally:
        await spares.close()


@atexit.register
def _abandon_all() -> None:
    for spares in list(_spares.values()):
        spares.abandon()
    _spares.clear()
