"""One background event loop per process, for callers that drive envhub's async envs synchronously.

gymnasium, TRL and SkyRL-Gym call `reset`/`step` from plain functions, sometimes inside a thread that
already runs a loop (a notebook); running each call on a loop of our own, in a daemon thread, works in
both cases and never nests loops. A forked process (a vector env's or a data loader's worker) starts its
own loop, since threads do not survive a fork.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

T = TypeVar("T")
P = ParamSpec("P")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on the background loop and wait for its result (its exception is raised here)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="envhub-sync-loop", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coro, _loop).result()


def build(factory: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Call `factory` on the background loop's thread, where what it builds will be driven: some objects
    (envs among them) bind loop objects such as locks, queues and clients when they are built."""

    async def call() -> T:
        return factory(*args, **kwargs)

    return run(call())


def _forget_loop_after_fork() -> None:
    """A forked child inherits the loop but not the thread running it: waiting on it would hang forever.

    The lock is replaced too, since another thread may have held it at the moment of the fork.
    """
    global _loop, _loop_lock
    _loop, _loop_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_loop_after_fork)
