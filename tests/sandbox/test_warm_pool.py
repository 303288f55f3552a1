"""The spares behind `envhub.sandbox.open("local")`: started ahead, handed over once, gone with the loop."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy, SandboxPool
from envhub.sandbox.local import LocalSandbox
from envhub.sandbox.native import server_name
from envhub.sandbox.scratch import SCRATCH_PREFIX
from envhub.sandbox.spares import SPARES_ENV, _spares


async def _spare_ready() -> None:
    """Wait until this loop's spare has started (its exec server answering)."""
    pool = _spares[asyncio.get_running_loop()]
    async with asyncio.timeout(60):
        while pool.idle < 1:  # noqa: ASYNC110 - the pool has no event to wait on
            await asyncio.sleep(0.05)


async def _open() -> LocalSandbox:
    box = await sandbox.open("local")
    assert isinstance(box, LocalSandbox)
    return box


async def test_open_takes_a_started_spare_and_never_hands_one_out_twice() -> None:
    first = await _open()  # no spare yet: made on the spot, and one starts warming
    await first.exec("echo secret > /work/left.txt; echo x > /tmp/t; sleep 60 &")
    await first.close()
    await _spare_ready()
    second = await _open()
    try:
        assert second is not first and second._scratch != first._scratch
        assert second.report().details["exec_server"] == "running"  # started before anyone asked
        r = await second.exec("ls -A /work /tmp; ps -e -o comm=")
        assert r.stdout.split() == ["/tmp:", "/work:", server_name(), "sh", "ps"], r.stdout
        await _spare_ready()
        third = await _open()
        assert third is not second
        await third.close()
    finally:
        await second.close()
    assert not first._scratch.exists() and not second._scratch.exists()


async def test_only_the_default_policy_has_spares() -> None:
    async with sandbox.open("local", policy=IsolationPolicy(memory_mb=300)) as sb:
        assert (await sb.exec("echo hi")).stdout == "hi\n"
    assert asyncio.get_running_loop() not in _spares


async def test_spares_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPARES_ENV, "0")
    async with sandbox.open("local") as sb:
        assert (await sb.exec("echo hi")).stdout == "hi\n"
    assert asyncio.get_running_loop() not in _spares


async def test_a_bad_spares_setting_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPARES_ENV, "many")
    with pytest.raises(ValueError, match=f"{SPARES_ENV}='many' is not a whole number"):
        await sandbox.open("local")


async def test_a_pool_hands_over_an_idle_sandbox_for_good() -> None:
    pool = SandboxPool(warm=1)
    await pool.start()
    taken = pool.take_idle()
    assert taken is not None and pool.idle == 0
    await pool.close()
    assert not taken.closed  # no longer the pool's to close
    assert (await taken.exec("echo mine")).stdout == "mine\n"
    await taken.close()


_SCRIPT = """
import asyncio, os, envhub.sandbox as s
from envhub.sandbox.spares import _spares

async def main():
    async with s.open("local") as sb:
        await sb.exec("true")
    pool = _spares[asyncio.get_running_loop()]
    while pool.idle < 1:
        await asyncio.sleep(0.05)
    print(os.getpid(), flush=True)

{run}
"""


@pytest.mark.parametrize(
    "run",
    [
        pytest.param("asyncio.run(main())", id="asyncio.run"),
        pytest.param(  # closed without cancelling its tasks: the spares go at interpreter exit
            "loop = asyncio.new_event_loop()\nloop.run_until_complete(main())\nloop.close()", id="bare-loop"
        ),
    ],
)
def test_spares_leave_nothing_when_the_program_ends(run: str) -> None:
    code = textwrap.dedent(_SCRIPT).format(run=run)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    pid = done.stdout.strip()
    assert pid.isdigit()
    assert not list(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}{pid}-*"))
    assert f"{SCRATCH_PREFIX}{pid}-" not in Path("/proc/self/mounts").read_text()


async def test_a_replacement_warms_even_when_the_last_one_is_taken_the_moment_it_is_ready() -> None:
    """Taken in the same loop turn as its warming task ended (whose bookkeeping comes a turn later),
    a spare must still be replaced: waiting on `idle` with sleep(0) takes it exactly then."""
    async with SandboxPool(warm=1) as pool:
        for _ in range(4):
            taken = pool.take_idle()
            assert taken is not None
            await taken.close()
            async with asyncio.timeout(60):
                while pool.idle < 1:  # noqa: ASYNC110 - the pool has no event to wait on
                    await asyncio.sleep(0)
