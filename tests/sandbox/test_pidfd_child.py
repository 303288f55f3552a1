"""The exec server's bwrap started without asyncio's subprocess transport (envhub.sandbox.pidfd_child):
its exit code is seen, it is reaped, and a kernel without pidfds gets asyncio's path instead."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import pidfd_child
from envhub.sandbox.local import LocalSandbox
from envhub.sandbox.pidfd_child import PidfdChild

pytestmark = pytest.mark.skipif(not pidfd_child.supported(), reason="this kernel has no pidfds (Linux < 5.3)")


async def test_a_child_is_waited_for_and_reaped() -> None:
    child = PidfdChild(["/bin/sh", "-c", "sleep 0.2; exit 3"])
    running = child.returncode is None
    assert running and child.stdin is None
    assert await asyncio.wait_for(child.wait(), 10) == 3
    assert child.returncode == 3
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks; reaped: no zombie


async def test_a_killed_child_reports_its_signal() -> None:
    child = PidfdChild(["/bin/sleep", "30"])
    child.kill()
    assert await asyncio.wait_for(child.wait(), 10) == -signal.SIGKILL
    child.kill()  # once it is gone: nothing to signal, no error


@pytest.mark.parametrize("pidfds", [True, False])
async def test_the_exec_server_runs_and_is_gone_after_close(
    pidfds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pidfd_child, "supported", lambda: pidfds)
    async with sandbox.open("local", spare=False) as sb:
        assert isinstance(sb, LocalSandbox)
        result = await sb.exec("echo served")
        assert result.stdout == "served\n"
        (server,) = sb._children
        assert isinstance(server, PidfdChild) is pidfds
        running = server.returncode is None
        assert running
    assert server.returncode is not None and not sb._children
    with pytest.raises(ChildProcessError):
        os.waitpid(server.pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks
