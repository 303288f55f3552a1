"""A program that ends with a local sandbox still open leaves nothing of it on the host.

Its processes die with it (bwrap's --die-with-parent), but its scratch area is a tmpfs mounted on the
host: left there, and with the program's owner lease removed at its exit, no later sweep could prove it
orphaned for a day, and every bubblewrap start on the host copies each such mount into its namespace.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from envhub.sandbox import IsolationPolicy
from envhub.sandbox.exec_client import ExecServer
from envhub.sandbox.local import LocalSandbox
from envhub.sandbox.scratch import SCRATCH_PREFIX
from tests.envhub_testkit.leaks import sandbox_footprint

_LEFT_OPEN = """
import asyncio, os, envhub.sandbox as sandbox

kept = []

async def main():
    sb = await sandbox.open("local", spare=False).__aenter__()  # never closed
    await sb.exec("true")  # its exec server runs
    kept.append(sb)
    print(os.getpid(), flush=True)

asyncio.run(main())
"""


def test_a_sandbox_left_open_at_exit_is_removed(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LEFT_OPEN], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    pid = done.stdout.strip()
    left = list(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}{pid}-*"))
    mounted = [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if f"{SCRATCH_PREFIX}{pid}-" in line
    ]
    assert left == [] and mounted == [], (left, mounted)
    assert "is closed" not in done.stderr, done.stderr


async def test_a_sandbox_cancelled_twice_while_it_starts_is_cleaned_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A loop's shutdown cancels every task, and the spares' guard cancels the spares it is making once
    more: the second cancel must not cut the clean-up of a sandbox whose exec server is starting short
    (its scratch stayed mounted, seen in a full test run's leak check)."""
    started = asyncio.Event()

    async def never_ready(self: ExecServer, *, source: int | None, errors: int) -> None:
        started.set()
        await asyncio.Event().wait()

    monkeypatch.setattr(ExecServer, "start", never_ready)
    before = sandbox_footprint()
    making = asyncio.create_task(LocalSandbox.create(IsolationPolicy(), start_server=True))
    await asyncio.wait_for(started.wait(), 30)
    making.cancel()
    await asyncio.sleep(0)  # the clean-up begins
    making.cancel()
    with pytest.raises(asyncio.CancelledError):
        await making
    assert sandbox_footprint() == before
