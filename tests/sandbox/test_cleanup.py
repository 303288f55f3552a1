"""Clean-ups that finish however often their task is cancelled (envhub.sandbox.cleanup)."""

from __future__ import annotations

import asyncio

import pytest

from envhub.sandbox import IsolationPolicy, SandboxPool
from envhub.sandbox.cleanup import finish
from envhub.sandbox.local import LocalSandbox
from tests.envhub_testkit.leaks import sandbox_footprint


async def _cancel_twice(task: asyncio.Task[None], began: asyncio.Event) -> None:
    """Cancel `task`, wait until its clean-up has begun, and cancel it again: what a loop's shutdown
    does to a task a guard had already cancelled."""
    task.cancel()
    await asyncio.wait_for(began.wait(), 30)
    task.cancel()
    await asyncio.sleep(0.05)


async def test_finish_runs_a_cleanup_to_its_end_under_repeated_cancels() -> None:
    began, gate = asyncio.Event(), asyncio.Event()
    steps: list[str] = []

    async def cleanup() -> None:
        steps.append("began")
        began.set()
        await gate.wait()
        steps.append("ended")

    async def caller() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await finish(cleanup())
            raise

    task = asyncio.create_task(caller())
    await asyncio.sleep(0)
    await _cancel_twice(task, began)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done() and steps == ["began"]  # still cleaning up, not given up
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert steps == ["began", "ended"]


async def test_a_cleanups_own_error_reaches_the_caller() -> None:
    async def failing() -> None:
        raise OSError("umount failed")

    with pytest.raises(OSError, match="umount failed"):
        await finish(failing())


async def test_a_pool_lease_cancelled_twice_is_destroyed_before_its_task_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lease's release (a local sandbox's close: processes, scratch tmpfs, slot) must be over when
    the cancelled task ends, or a loop that closes next leaves it half done."""
    before = sandbox_footprint()
    closing, gate = asyncio.Event(), asyncio.Event()
    real_close = LocalSandbox.close

    async def slow_close(self: LocalSandbox) -> None:
        closing.set()
        await gate.wait()
        await real_close(self)

    monkeypatch.setattr(LocalSandbox, "close", slow_close)
    leased: list[LocalSandbox] = []
    async with SandboxPool(warm=0, policy=IsolationPolicy(memory_mb=300)) as pool:

        async def episode() -> None:
            async with pool.sandbox() as box:
                assert isinstance(box, LocalSandbox)
                leased.append(box)
                await asyncio.Event().wait()

        task = asyncio.create_task(episode())
        async with asyncio.timeout(60):
            while not leased:  # noqa: ASYNC110 - the pool has no event to wait on
                await asyncio.sleep(0.01)
        await _cancel_twice(task, closing)
        assert not task.done()  # waiting for the close, not gone without it
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert leased[0].closed
    assert sandbox_footprint() == before
