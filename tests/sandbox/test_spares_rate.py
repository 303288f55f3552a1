"""Spares sized from the open rate, and spares of an environment's own policy: how many are kept when
opens come at a given rate, that each is handed out once and to an open of its exact policy only, and
that nothing of one is visible in another."""

from __future__ import annotations

import asyncio
import math
import tempfile
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import spares
from envhub.sandbox.local import LocalSandbox
from envhub.sandbox.native import server_name
from envhub.sandbox.policy import IsolationPolicy, MiB
from envhub.sandbox.spares import HEADROOM, MAX_TARGET, OpenRate, Spares, close_spares, spares_idle, wanted

OWN = IsolationPolicy(memory_mb=320, wall_time_s=20)
"""A policy of an environment's own (not the default), as a grader declares."""


def test_the_open_rate_is_that_of_the_latest_opens_and_falls_after_a_pause() -> None:
    rate = OpenRate()
    assert rate.per_second(0.0) == 0.0
    for i in range(8):
        rate.opened(i * 0.02)  # 50 opens a second
    assert rate.per_second(7 * 0.02) == pytest.approx(50.0)
    assert rate.per_second(10.0) < 1.0  # no open for ten seconds: the next one sees a slow rate


@pytest.mark.parametrize(
    ("rate", "build_s", "floor", "expected"),
    [
        (0.0, 0.05, 1, 1),  # no opens yet: the configured count
        (1.0, 0.05, 1, 1),  # an open a second: one spare is plenty
        (50.0, 0.05, 1, math.ceil(50 * 0.05 * HEADROOM)),  # back to back: those taken while one is made
        (160.0, 0.1, 1, MAX_TARGET),  # a burst beyond what the host may hold: capped
        (math.inf, 0.05, 1, MAX_TARGET),  # two opens in one clock tick
        (50.0, 0.05, 0, math.ceil(50 * 0.05 * HEADROOM)),  # another policy: no floor
        (0.0, 0.05, 0, 0),
    ],
)
def test_spares_wanted_follow_the_open_rate(rate: float, build_s: float, floor: int, expected: int) -> None:
    assert wanted(rate, build_s, floor) == expected


async def _idle(pool: Spares, count: int) -> None:
    async with asyncio.timeout(120):
        while pool.idle < count:  # noqa: ASYNC110 - the spares have no event to wait on
            await asyncio.sleep(0.02)


async def test_opens_at_rate_r_keep_the_spares_that_rate_needs_each_handed_out_once() -> None:
    """Opens at 40 a second with a spare taking 0.035 s to make: ceil(40 * 0.035 * HEADROOM) = 4 spares
    are made side by side and kept ready; each taken one is a different sandbox, never seen again."""
    pool = Spares(1)
    try:
        loop = asyncio.get_running_loop()
        now = loop.time()
        for i in range(7):
            pool.rate.opened(now - (7 - i) / 40)
        pool.build_s = 0.035
        assert pool.take() is None  # none ready yet: they start warming at once, side by side
        assert pool.target == math.ceil(40 * 0.035 * HEADROOM) == 4 and pool.making == 4
        await _idle(pool, 4)
        taken = [pool.take() for _ in range(4)]
        assert all(isinstance(sb, LocalSandbox) for sb in taken)
        local = [sb for sb in taken if isinstance(sb, LocalSandbox)]
        assert len({id(sb) for sb in local}) == 4
        assert len({sb._scratch for sb in local}) == 4 and len({sb._slot.uid for sb in local}) == 4
        pool.target = 1  # as after a pause: the closes below need make only the one kept at rest
        # Nothing one spare holds is visible in another: each has its own scratch, uid and namespaces.
        await local[0].write_file("mine.txt", "first")
        await local[0].exec("echo x > /tmp/t; sleep 30 &")
        for other in local[1:]:
            seen = await other.exec("ls -A /work /tmp; ps -e -o comm=")
            assert seen.stdout.split() == ["/tmp:", "/work:", server_name(), "sh", "ps"], seen.stdout
        for sb in local:
            await sb.close()
        await _idle(pool, 1)
        again = pool.take()
        assert again is not None and all(again is not sb for sb in local)
        await again.close()
    finally:
        await pool.close()


async def test_an_environments_own_policy_gets_spares_of_that_policy_after_two_opens() -> None:
    for _ in range(2):  # the first open marks the policy, the second starts its spares
        async with sandbox.open("local", policy=OWN) as sb:
            assert sb.report().details["exec_server"] == "starts with the next command"
    async with asyncio.timeout(120):
        while spares_idle(OWN) < 1:  # noqa: ASYNC110 - the spares have no event to wait on
            await asyncio.sleep(0.02)
    other = IsolationPolicy(memory_mb=320, wall_time_s=21)  # differs in one limit: not OWN's spare
    async with sandbox.open("local", policy=other) as sb:
        assert sb.report().details["exec_server"] == "starts with the next command"
    assert spares_idle(OWN) >= 1
    async with sandbox.open("local", policy=OWN) as sb:
        assert isinstance(sb, LocalSandbox)
        assert sb.report().details["exec_server"] == "running"  # a spare: started before the open
        assert sb.policy == OWN
        if sb._slot.cgroups:  # the spare's slot holds OWN's limits, not the default's
            limit = (sb._slot.cgroups["memory"] / "memory.limit_in_bytes").read_text()
            assert int(limit) == OWN.memory_mb * MiB
        assert (await sb.exec("echo hi")).stdout == "hi\n"


def _publish(folder: Path, text: str) -> Path:
    """`folder`/data.txt holding `text`, a new file each time (renamed over the old), readable by all."""
    folder.chmod(0o755)
    fresh = folder / "new.txt"
    fresh.write_text(text)
    fresh.chmod(0o644)
    return fresh.replace(folder / "data.txt")


async def test_a_policy_with_read_only_binds_never_gets_a_spare() -> None:
    """A bind made ahead would show the host path as it was when the spare started."""
    with tempfile.TemporaryDirectory() as folder:
        data = _publish(Path(folder), "v0")
        policy = IsolationPolicy(ro_binds={str(data): "/data.txt"})
        for turn in range(3):
            async with sandbox.open("local", policy=policy) as sb:
                assert sb.report().details["exec_server"] == "starts with the next command"
                assert (await sb.exec("cat /data.txt")).stdout == f"v{turn}"
            _publish(Path(folder), f"v{turn + 1}")  # a new file at the bound path: the next open must see it
        assert spares_idle(policy) == 0
    assert spares._key(policy) is None


async def test_close_spares_leaves_nothing_and_the_next_open_starts_them_anew() -> None:
    own = IsolationPolicy(memory_mb=320)
    for _ in range(3):  # the default policy has spares from its first open, this one from its second
        async with sandbox.open("local"), sandbox.open("local", policy=own):
            pass
    async with asyncio.timeout(30):
        while spares_idle() == 0 or spares_idle(own) == 0:  # noqa: ASYNC110 - spares have no event
            await asyncio.sleep(0.01)
    await close_spares()
    assert (spares_idle(), spares_idle(own)) == (0, 0)
    async with sandbox.open("local") as sb:
        assert (await sb.exec("echo ok")).stdout == "ok\n"
