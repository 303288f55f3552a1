"""The sandbox pool: pre-warming, rate cap, recycling, and no leaks on cancellation or crashes."""

from __future__ import annotations

import asyncio

import pytest

from envhub.sandbox import IsolationPolicy, SandboxError, SandboxPool
from tests.envhub_testkit.leaks import sandbox_footprint


async def test_prewarms_and_replaces_used_sandboxes() -> None:
    async with SandboxPool(warm=2, policy=IsolationPolicy()) as pool:
        assert pool.idle == 2 and pool.created == 2
        async with pool.sandbox() as sb:
            assert (await sb.exec("echo hi")).stdout == "hi\n"
            assert pool.leased == 1
        await asyncio.sleep(0.5)  # the background replacement
        assert pool.idle == 2 and pool.leased == 0
        assert sb.closed  # destroyed after use, not recycled
        assert pool.created == 3


async def test_recycle_wipes_state_and_reuses() -> None:
    async with SandboxPool(warm=0, recycle=True) as pool:
        async with pool.sandbox() as first:
            await first.exec("echo secret > /work/left.txt; echo x > /tmp/t")
        async with pool.sandbox() as second:
            assert second is first
            r = await second.exec("ls -A /work /tmp")
            assert "left.txt" not in r.stdout and r.stdout.split() == ["/tmp:", "/work:"]
        assert pool.created == 1


async def test_crashed_lease_is_destroyed_not_recycled() -> None:
    async with SandboxPool(warm=1, recycle=True) as pool:
        held = []

        async def episode() -> None:
            async with pool.sandbox() as sb:
                held.append(sb)
                await sb.exec("sleep 30 &")
                raise RuntimeError("episode crashed")

        with pytest.raises(RuntimeError, match="episode crashed"):
            await episode()
        assert held[0].closed


async def test_creation_rate_is_capped() -> None:
    pool = SandboxPool(warm=0, max_creates_per_s=10)
    loop = asyncio.get_running_loop()
    start = loop.time()
    boxes = await asyncio.gather(*(pool.acquire() for _ in range(4)))
    elapsed = loop.time() - start
    await pool.close()
    assert all(b.closed for b in boxes)
    # 4 creations at 10/s need at least 3 intervals of 0.1 s between them.
    assert elapsed >= 0.29


async def test_capacity_bounds_live_sandboxes() -> None:
    async with SandboxPool(warm=0, max_sandboxes=1) as pool:
        first = await pool.acquire()
        waiter = asyncio.create_task(pool.acquire())
        await asyncio.sleep(0.2)
        assert not waiter.done()
        await pool.release(first)
        second = await asyncio.wait_for(waiter, 10)
        await pool.release(second)


async def test_cancelled_episodes_leak_nothing() -> None:
    before = sandbox_footprint()
    pool = SandboxPool(warm=2)
    await pool.start()

    async def episode() -> None:
        async with pool.sandbox() as sb:
            py = await sb.python()
            await py.run("x = 1")
            await sb.exec("sleep 30 & sleep 30")

    tasks = [asyncio.create_task(episode()) for _ in range(3)]
    await asyncio.sleep(1.0)
    for t in tasks:
        t.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    await pool.close()
    assert sandbox_footprint() == before
    with pytest.raises(SandboxError, match="closed"):
        await pool.acquire()


async def test_closing_the_pool_reaps_leased_sandboxes() -> None:
    pool = SandboxPool(warm=1)
    await pool.start()
    held = await pool.acquire()
    await held.exec("sleep 30 &")
    await pool.close()
    assert held.closed


def test_pool_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="warm"):
        SandboxPool(warm=5, max_sandboxes=2)
