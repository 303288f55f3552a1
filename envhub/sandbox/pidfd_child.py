"""A child process whose exit the event loop learns from a pidfd, without asyncio's subprocess transport.

Why: for every child it starts, asyncio (Python 3.11's default watcher) starts a thread that blocks in
`waitpid`, and builds a transport, a protocol and their futures around the process. The local backend's
exec server needs none of it: its pipes are plain descriptors, and all the host ever asks is whether the
process still runs and when it has exited. It is started once for every sandbox opened, so that machinery
was a measurable share of the host's CPU an open (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import subprocess
from typing import Any

from envhub.sandbox.exec_client import resolve


class PidfdChild:
    """What the local backend uses of `asyncio.subprocess.Process`, for a child whose pipes are not asyncio's:
    `pid`, `returncode`, `wait()`, `kill()`. It is reaped by whoever first sees it exit (`returncode`,
    `wait`), with a non-blocking `waitpid` on its pid alone."""

    stdin: None = None
    """No asyncio pipe: the caller holds the descriptors it passed."""

    def __init__(self, args: list[str], **popen: Any) -> None:
        self._popen = subprocess.Popen(args, **popen)
        self.pid = self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        while (code := self._popen.poll()) is None:
            with contextlib.suppress(ProcessLookupError):  # reaped meanwhile: poll says so
                await exited(self.pid)
        return code

    def kill(self) -> None:
        self._popen.kill()


@functools.cache
def supported() -> bool:
    """Whether this kernel has pidfds (Linux 5.3): without them, children are started by asyncio."""
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


async def exited(pid: int) -> None:
    """Return once our child `pid` has exited (it may then still need reaping). Raises OSError where no
    pidfd can be had: a kernel without them, or a pid already reaped."""
    fd = os.pidfd_open(pid)
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, resolve, done)
    try:
        await done
    finally:
        loop.remove_reader(fd)
        os.close(fd)
