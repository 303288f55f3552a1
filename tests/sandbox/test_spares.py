"""When a taken spare is replaced: not while the episode that took it starts (building a sandbox would
compete with its first commands), but when it closes, or REPLACE_AFTER_S later if it is still open."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import spares
from envhub.sandbox.scratch import SCRATCH_PREFIX


def _our_scratch_areas() -> list[Path]:
    """The scratch areas of this process's local sandboxes: one per sandbox made (or being made)."""
    return list(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}{os.getpid()}-*"))


async def _spare_ready() -> None:
    async with asyncio.timeout(60):
        while spares.spares_idle() < 1:  # noqa: ASYNC110 - the spares have no event to wait on
            await asyncio.sleep(0.02)


async def test_a_taken_spare_is_replaced_when_it_closes_not_while_it_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spares, "REPLACE_AFTER_S", 600.0)  # so only the close can start the replacement
    async with sandbox.open("local"):
        pass  # no spare yet: this makes the loop's first one
    await _spare_ready()
    before = set(_our_scratch_areas())
    async with sandbox.open("local") as sb:
        assert (await sb.exec("echo mine")).stdout == "mine\n"
        await asyncio.sleep(0.5)  # time enough for a replacement started at the open to exist
        assert set(_our_scratch_areas()) == before, "a replacement started while the spare's episode ran"
        assert spares.spares_idle() == 0
    await _spare_ready()  # the close started it


async def test_a_spare_still_open_after_the_delay_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spares, "REPLACE_AFTER_S", 0.05)
    async with sandbox.open("local"):
        pass
    await _spare_ready()
    async with sandbox.open("local") as sb:
        await _spare_ready()  # while `sb` is still open
        assert not sb.closed
        assert (await sb.exec("echo still mine")).stdout == "still mine\n"


async def test_two_spares_are_kept_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spares.SPARES_ENV, "2")
    async with sandbox.open("local"):
        pass
    async with asyncio.timeout(60):
        while spares.spares_idle() < 2:  # noqa: ASYNC110 - the spares have no event to wait on
            await asyncio.sleep(0.02)
    first, second = await sandbox.open("local"), await sandbox.open("local")
    try:
        assert first is not second and spares.spares_idle() == 0
    finally:
        await first.close()
        await second.close()
    async with asyncio.timeout(60):
        while spares.spares_idle() < 2:  # noqa: ASYNC110 - the spares have no event to wait on
            await asyncio.sleep(0.02)


_LAST_ACT = """
import asyncio, envhub.sandbox as sandbox, envhub.sandbox.spares as spares

async def main():
    async with sandbox.open("local"):
        pass
    while spares.spares_idle() < 1:
        await asyncio.sleep(0.02)
    async with sandbox.open("local") as sb:  # a spare: its close, the program's last act, is due one
        await sb.exec("true")

asyncio.run(main())
print("exited", flush=True)
"""


@pytest.mark.parametrize("run", range(2))
def test_a_program_whose_last_act_closes_a_spare_exits(run: int) -> None:
    """A replacement begun in the event loop's last turn and cancelled by asyncio.run's shutdown before
    asyncio connected the process's pipes never hears of its exit (Python 3.11): the program hung."""
    done = subprocess.run([sys.executable, "-c", _LAST_ACT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "exited\n", done.stderr
