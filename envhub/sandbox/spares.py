"""The started spares behind `envhub.sandbox.open("local")`: a cold open takes a ready sandbox and a fresh
one is prepared in the background. A spare is handed out once and never taken back.

Above the backends, beside `SandboxPool` (which it uses): `open` asks here before it asks a backend, so
the local backend itself knows nothing of spares and no import runs back down into it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import weakref
from typing import Any

from envhub.sandbox.base import Sandbox
from envhub.sandbox.policy import IsolationPolicy
from envhub.sandbox.pool import SandboxPool

SPARES_ENV = "ENVHUB_SANDBOX_SPARES"
"""How many started sandboxes `open("local")` keeps ready per event loop for the default policy (default
1, at most MAX_SPARES); 0 turns them off."""
MAX_SPARES = 8
_spares: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SandboxPool] = weakref.WeakKeyDictionary()
_guards: set[asyncio.Task[None]] = set()


def spare_count() -> int:
    raw = os.environ.get(SPARES_ENV, "1").strip()
    try:
        count = int(raw)
    except ValueError:
        raise ValueError(
            f"{SPARES_ENV}={raw!r} is not a whole number; set it to 0 (off) up to {MAX_SPARES}"
        ) from None
    return max(0, min(count, MAX_SPARES))


async def take_spare(policy: IsolationPolicy) -> Sandbox | None:
    """A started local sandbox for `policy` if one is ready, else None; either way a replacement starts.

    Only the default policy has spares: a spare is started before anyone asks, so its policy must be
    known then, and environments that declare their own limits open sandboxes of their own.
    """
    if policy != IsolationPolicy():
        return None
    count = spare_count()
    if count == 0:
        return None
    return _loop_spares(count).take_idle()


def spares_idle() -> int:
    """How many started spares this event loop has ready for `open("local")` (the benchmark waits on it)."""
    pool = _spares.get(asyncio.get_running_loop())
    return 0 if pool is None or pool.closed else pool.idle


def _loop_spares(count: int) -> SandboxPool:
    """This event loop's spares: made on first use, and closed when the loop shuts down (asyncio.run and
    every asyncio.Runner cancel what is still pending then, which ends the guard task below)."""
    loop = asyncio.get_running_loop()
    pool = _spares.get(loop)
    if pool is not None and not pool.closed:
        return pool
    for other, stale in list(_spares.items()):
        if other.is_closed():  # closed without shutting down its tasks: clean up what it left
            _abandon(stale)
            del _spares[other]
    pool = SandboxPool(warm=count, backend="local", policy=IsolationPolicy(), max_sandboxes=count)
    _spares[loop] = pool
    guard = loop.create_task(_guard(pool), name="envhub sandbox spares")
    _guards.add(guard)
    guard.add_done_callback(_guards.discard)
    return pool


async def _guard(pool: SandboxPool) -> None:
    """Wait until cancelled (the loop is shutting down), then close the pool."""
    try:
        await asyncio.Event().wait()
    finally:
        await pool.close()


def _abandon(pool: SandboxPool) -> None:
    """Free the spares of a pool whose event loop is gone, without one: processes, scratch and slot."""
    pool._closed = True
    for sandbox in list(pool._alive):
        pool._alive.discard(sandbox)
        abandon: Any = getattr(sandbox, "abandon", None)  # local sandboxes: the only kind kept as spares
        if abandon is not None:
            with contextlib.suppress(Exception):  # best effort at exit: the next process sweeps the rest
                abandon()


@atexit.register
def _abandon_all() -> None:
    for pool in list(_spares.values()):
        _abandon(pool)
    _spares.clear()
