"""Calling code an environment author wrote, sync or async, without ever blocking the event loop."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any


async def call_author_code(func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Await `func` if it is a coroutine function; otherwise run it in a worker thread.

    Thousands of episodes share one loop, so one slow sync tool or grader must not stall the others.
    """
    if inspect.iscoroutinefunction(func):
        return await func(*args, **kwargs)
    return await asyncio.to_thread(func, *args, **kwargs)
