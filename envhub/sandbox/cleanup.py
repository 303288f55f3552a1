"""Clean-up that survives repeated cancellation.

`await asyncio.shield(close())` in an `except BaseException` protects a clean-up from the first cancel
only: a second one (a loop's shutdown cancels every task; a guard may cancel its own task again) ends
the wait, and if the loop then closes, the clean-up stops half done, leaving a scratch mounted, a slot
held or a process running. Every clean-up of host resources in the sandbox layer goes through `finish`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable


async def finish(cleanup: Awaitable[None]) -> None:
    """Run `cleanup` to its end however often the caller is cancelled meanwhile. Its own error is
    raised; the caller then re-raises what it was cleaning up after (a cancel included)."""
    task = asyncio.ensure_future(cleanup)
    while not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task)
    task.result()
