"""`Sandbox.start_background`: a program that outlives the commands around it, on the real backends
(bubblewrap for local, the Docker engine for docker), under the sandbox's limits, and gone with it."""

from __future__ import annotations

import asyncio

from envhub.sandbox import Sandbox
from envhub.sandbox.base import Background
from tests.sandbox.conftest import open_backend

HELD = "until ! flock -n {lock} true; do sleep 0.01; done"
"""Waits until a process holds the lock file: how a test sees a process of the sandbox is alive, from any
command (the local backend's background runs in a pid namespace of its own, so pids do not tell)."""
SESSION = r"""
flock /tmp/session.lock sleep 300 &
HELD
echo "ready $(id -u)"
while IFS= read -r line; do
    case $line in
        alive) flock -n /tmp/session.lock true && echo no || echo yes ;;
        write) echo from-background > note.txt; echo written ;;
        net) cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' ' | tr '\n' ' '; echo ;;
        *) echo "unknown $line" ;;
    esac
done
echo "stdin closed" >&2
exit 3
""".replace("HELD", HELD.format(lock="/tmp/session.lock"))


async def alive(sb: Sandbox, *locks: str) -> list[str]:
    """Which of the lock files a live process still holds."""
    script = 'for f in "$@"; do flock -n "$f" true || echo "$f"; done'
    return (await sb.exec(["sh", "-c", script, "sh", *locks])).stdout.split()


async def ask(bg: Background, line: str) -> str:
    bg.stdin.write(line.encode() + b"\n")
    await bg.stdin.drain()
    return (await asyncio.wait_for(bg.stdout.readline(), 20)).decode().strip()


async def test_a_background_program_and_its_children_outlive_the_commands(sb: Sandbox) -> None:
    bg = await sb.start_background(["sh", "-c", SESSION])
    ready = (await asyncio.wait_for(bg.stdout.readline(), 20)).decode().split()
    uid = (await sb.exec("id -u")).stdout.strip()
    assert ready == ["ready", uid]  # the commands' uid: the same limits and files as theirs
    for _ in range(3):  # each command ends by killing what it left running; the background is spared
        assert (await sb.exec("sleep 0.01 & echo ok")).stdout == "ok\n"
    assert await ask(bg, "alive") == "yes"
    assert await ask(bg, "write") == "written"
    assert await sb.read_file("note.txt") == b"from-background\n"  # one writable area for both
    assert await ask(bg, "net") == "lo"  # no network but loopback, as for every command
    assert bg.returncode is None
    bg.stdin.close()  # EOF to the program; its output still comes back
    assert await asyncio.wait_for(bg.wait(), 20) == 3
    assert await bg.stderr.read() == b"stdin closed\n"


async def test_what_a_command_leaves_is_still_killed_while_a_background_runs(sb: Sandbox) -> None:
    """A command cannot ride along with the background: not by leaving a child, nor by detaching one
    into a session of its own (setsid), nor by orphaning it (a double fork)."""
    bg = await sb.start_background(["sh", "-c", SESSION])
    await asyncio.wait_for(bg.stdout.readline(), 20)
    locks = ["/tmp/child", "/tmp/detached", "/tmp/orphan"]
    started = await sb.exec(
        "flock /tmp/child sleep 300 & setsid -f flock /tmp/detached sleep 300; "
        "(flock /tmp/orphan sleep 300 &); " + "; ".join(HELD.format(lock=lock) for lock in locks)
    )
    assert started.exit_code == 0, started.stderr
    assert await alive(sb, *locks) == []
    assert await ask(bg, "alive") == "yes"
    await bg.kill()


async def test_leftovers_that_use_up_the_pids_limit_are_killed_while_a_background_runs(sb: Sandbox) -> None:
    """The clean-up forks nothing, so a command that left the sandbox no process to spare cannot stop
    it: its leftovers go, the background stays, and the next command runs."""
    bg = await sb.start_background(["sh", "-c", SESSION])
    await asyncio.wait_for(bg.stdout.readline(), 20)
    flood = await sb.exec("for i in $(seq 200); do sleep 300 & done 2>/dev/null; echo flooded")
    assert flood.exit_code != 0 or flood.stdout == "flooded\n"
    after = await sb.exec("sleep 0.01 & echo ran")  # would fail to fork with the leftovers there
    assert after.stdout == "ran\n", after.stderr
    assert await ask(bg, "alive") == "yes"
    await bg.kill()


async def test_kill_ends_the_program_and_what_it_started(sb: Sandbox) -> None:
    script = f"flock /tmp/bgchild sleep 300 & {HELD.format(lock='/tmp/bgchild')}; echo up; wait"
    bg = await sb.start_background(["sh", "-c", script])
    assert await asyncio.wait_for(bg.stdout.readline(), 20) == b"up\n"
    assert await alive(sb, "/tmp/bgchild") == ["/tmp/bgchild"]
    await bg.kill()
    assert bg.returncode is not None and bg.returncode != 0
    await bg.kill()  # a second kill is a no-op
    assert await alive(sb, "/tmp/bgchild") == []


async def test_closing_the_sandbox_ends_its_background_programs(backend: str) -> None:
    box = await open_backend(backend)
    bg = await box.start_background(["sh", "-c", "echo up; sleep 300"])
    assert await asyncio.wait_for(bg.stdout.readline(), 20) == b"up\n"
    await box.close()
    assert await asyncio.wait_for(bg.wait(), 20) != 0  # the no_leaks fixture checks nothing is left


async def test_the_persistent_python_worker_runs_on_each_backend(sb: Sandbox) -> None:
    async with await sb.python() as py:
        await py.run("x = 41")
        assert (await py.run("x + 1")).stdout == "42\n"
        assert (await sb.exec("echo between")).stdout == "between\n"  # a command's clean-up spares it
        assert (await py.run("x")).stdout == "41\n"
