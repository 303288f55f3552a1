"""One background event loop per process, so trainers that call environments synchronously can drive
envhub's async envs.

TRL and SkyRL-Gym call `reset`/`step` from plain functions, sometimes inside a thread that already runs
a loop; running each call on a loop of our own (in a daemon thread) works in both cases and never nests
loops. A forked process (a data-loader worker) starts its own loop, since threads do not survive a fork.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from envhub.core import Env
from envhub.registration import make

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on the background loop and wait for its result (its exception is raised here)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="envhub-adapters", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coro, _loop).result()


def _forget_loop_after_fork() -> None:
    """A forked child inherits the loop but not the thread running it: waiting on it would hang."""
    global _loop, _loop_lock
    _loop, _loop_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_loop_after_fork)


def make_env(env_id: str, make_kwargs: dict[str, Any]) -> Env:
    """`envhub.make` on the background loop, where the env will run: some envs bind loop objects
    (locks, queues, clients) when they are built."""

    async def build() -> Env:
        return make(env_id, **make_kwargs)

    return run(build())
