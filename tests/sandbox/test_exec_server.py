"""The local sandbox's exec server: commands are spawned by a server that is the sandbox's pid 1.

What must hold: a command gets exactly what a bubblewrap of its own gave it (exit codes, error words,
environment, limits, seccomp), nothing one command leaves running is alive for the next, and nothing a
command does to the server changes another command's result. Each hostile probe is followed by a
command whose result is checked, from the same server.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy, SandboxError, close_spares, native
from envhub.sandbox.base import to_argv
from envhub.sandbox.local import LocalSandbox

POLICY = IsolationPolicy(memory_mb=256, pids=64, disk_mb=64, wall_time_s=20)
_PROCESSES = (
    "import os\n"
    "for p in sorted((p for p in os.listdir('/proc') if p.isdigit()), key=int):\n"
    "    if int(p) != os.getpid():\n"
    "        try: print(p, open(f'/proc/{p}/comm').read().strip())\n"
    "        except OSError: pass"
)
"""Every other process the command can see, by pid and name: the server (pid 1) and anything left over."""


SERVER_NAMES = {"native": "exec-server", "python": "python3"}
"""Each server's name in the process list (pid 1's comm)."""


@pytest.fixture(autouse=True, params=sorted(SERVER_NAMES))
async def server_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs against both exec servers: the C one (envhub.sandbox.native), the Python one."""
    monkeypatch.setenv("ENVHUB_SANDBOX_EXEC_SERVER", request.param)
    await close_spares()  # a spare started before this test would bring the other server
    kind: str = request.param
    return kind


@pytest.fixture
async def sb() -> AsyncIterator[LocalSandbox]:
    box = await sandbox.open("local", policy=POLICY)
    assert isinstance(box, LocalSandbox)
    try:
        yield box
    finally:
        await box.close()


async def _server_pid_on_host(sb: LocalSandbox) -> int:
    """The host pid of the sandbox's running exec server (its bwrap's child)."""
    assert (await sb.exec("true")).ok
    assert sb.report().details["exec_server"] == "running"
    server = sb._server
    assert server is not None
    bwrap = server._proc.pid
    children = Path(f"/proc/{bwrap}/task/{bwrap}/children").read_text().split()  # noqa: ASYNC240
    assert len(children) == 1, children
    return int(children[0])


async def _others(sb: LocalSandbox) -> list[str]:
    """The processes a fresh command sees besides the server and itself."""
    r = await sb.exec(["python3", "-c", _PROCESSES])
    assert r.ok, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"1 {SERVER_NAMES[os.environ['ENVHUB_SANDBOX_EXEC_SERVER']]}", lines
    return lines[1:]


async def test_commands_share_one_server_and_keep_bwraps_results(sb: LocalSandbox) -> None:
    """The same exit codes, words and environment as a command in a bubblewrap of its own."""
    pid = await _server_pid_on_host(sb)
    cases: list[tuple[sandbox.Command, dict[str, str]]] = [
        ("echo $A; pwd; exit 3", {}),
        (["no-such-command"], {}),
        (["/work"], {}),  # a directory: execvp says EACCES
        ("kill -9 $$", {}),
        (["env"], {"CALL": "1"}),
        (["./script"], {}),  # no #! line: execvp hands it to /bin/sh
    ]
    await sb.write_file("script", "echo from a script without a shebang\n", mode=0o755)
    for command, env in cases:
        served = await sb.exec(command, env=env)
        own = await sb._exec_in_own_namespaces(to_argv(command), None, 20, env, None)
        assert (served.exit_code, served.stdout, served.stderr) == (own.exit_code, own.stdout, own.stderr)
    r = await sb.exec("pwd", cwd="missing")
    assert r.exit_code == 1 and r.stderr == "bwrap: Can't chdir to /work/missing: No such file or directory\n"
    assert await _server_pid_on_host(sb) == pid  # every command above went through the same server


async def test_nothing_a_command_starts_outlives_it(sb: LocalSandbox) -> None:
    await sb.exec(
        "sleep 60 & (sleep 60 &) & setsid sleep 60 & nohup sh -c 'trap \"\" HUP TERM; sleep 60' &"
        " python3 -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)' &"
        " echo started"
    )
    assert await _others(sb) == []
    # A process that keeps forking (each parent exits) to stay ahead of a kill by pid is gone as well.
    r = await sb.exec(["python3", "-c", "import os\nwhile True:\n    if os.fork(): os._exit(0)"], timeout=1)
    assert r.exit_code == 0
    assert await _others(sb) == []


async def test_orphans_are_reaped_while_the_command_still_runs() -> None:
    """The server reaps on each SIGCHLD, not only at the command's end: a command's orphans must be
    reaped as they die, or their zombies would use up the pids limit mid-command.

    150 orphans against a limit of 32: unreaped, the 31st fork and every one after it fail until the
    command ends, and the retries below run into the timeout. On a loaded host the server may reap a
    moment late and a fork fail once; it is retried, as a program meeting EAGAIN does (the shared-host
    run saw two such forks fail with the Python server beside another suite)."""
    async with sandbox.open("local", policy=IsolationPolicy(pids=32, memory_mb=256)) as box:
        fork = "{ until (true &); do sleep 0.05; done; } 2>/dev/null"
        orphans = f"i=0; while [ $i -lt 150 ]; do {fork}; i=$((i+1)); done; echo done"
        r = await box.exec(["sh", "-c", orphans], timeout=60)
        assert (r.exit_code, r.timed_out, r.stdout, r.stderr) == (0, False, "done\n", "")
        assert (await box.exec(["true"])).exit_code == 0  # and the next command still runs


async def test_signals_cannot_reach_the_server(sb: LocalSandbox) -> None:
    pid = await _server_pid_on_host(sb)
    r = await sb.exec(
        "for s in KILL STOP TERM INT HUP USR1 SEGV CHLD 32 33 34 64; do kill -$s 1; done;"
        " kill -9 -1; echo survived"
    )
    assert r.stdout == "survived\n" and r.exit_code == 0, r
    status = (await sb.exec("grep -E '^(State|SigCgt)' /proc/1/status")).stdout
    assert "stopped" not in status and "SigCgt:\t0000000000000000" in status, status  # handles no signal
    assert (await sb.exec("echo next")).stdout == "next\n"
    assert await _server_pid_on_host(sb) == pid


async def test_a_flood_of_sigchld_only_makes_the_server_reap(sb: LocalSandbox) -> None:
    """SIGCHLD reaches the server (blocked, read from a signalfd): a flood of it changes no result."""
    flood = "(while :; do kill -CHLD 1; done) & "
    r = await sb.exec(flood + "sleep 0.5; echo done", timeout=5)
    assert (r.exit_code, r.stdout, r.timed_out) == (0, "done\n", False), r
    r = await sb.exec(flood + "sleep 30", timeout=1)
    assert r.timed_out and r.exit_code == -1, r
    assert (await sb.exec("echo next")).stdout == "next\n"


async def test_the_server_cannot_be_read_written_or_traced() -> None:
    """Without seccomp too: the server is non-dumpable, so ptrace and /proc/1/{mem,fd} are refused."""
    async with sandbox.open("local", policy=POLICY.model_copy(update={"seccomp": False})) as sb:
        r = await sb.exec(
            [
                "python3",
                "-c",
                "import ctypes, os\n"
                "for path, flags in (('/proc/1/mem', os.O_RDWR), ('/proc/1/environ', os.O_RDONLY)):\n"
                "    try: os.open(path, flags); print('OPENED', path)\n"
                "    except OSError as e: print('refused', path, e.errno)\n"
                "try: print('FDS', os.listdir('/proc/1/fd'))\n"
                "except OSError as e: print('refused fd', e.errno)\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "print('attach', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"
                "print('mine', sorted(os.listdir('/proc/self/fd')))",
            ]
        )
        assert "OPENED" not in r.stdout and "FDS" not in r.stdout, r.stdout
        assert "attach -1 1" in r.stdout  # EPERM
        # A command holds its three stdio pipes (and the listing's own descriptor), nothing of the server.
        assert "mine ['0', '1', '2', '3']" in r.stdout
        assert (await sb.exec("echo next")).stdout == "next\n"


async def test_each_command_keeps_its_own_timeout_and_limits(sb: LocalSandbox) -> None:
    slow = await sb.exec("sleep 30 & sleep 30", timeout=0.5)
    assert slow.timed_out and slow.exit_code == -1
    fast = await sb.exec("echo quick")
    assert fast.ok and fast.stdout == "quick\n"
    limits = (await sb.exec("ulimit -t; ulimit -Ht; ulimit -p; grep ^Seccomp: /proc/self/status")).stdout
    assert limits.split() == ["21", "21", "66", "Seccomp:", "2"]  # wall 20 s -> RLIMIT_CPU 21, pids + 2


async def test_concurrent_commands_each_get_a_result(sb: LocalSandbox) -> None:
    """The server runs one command at a time; the others get a bubblewrap of their own meanwhile."""
    results = await asyncio.gather(*(sb.exec(f"sleep 0.3; echo {i}") for i in range(4)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]
    assert await _others(sb) == []


async def test_a_server_killed_from_outside_is_a_sandbox_error_and_is_replaced(sb: LocalSandbox) -> None:
    """Never a made-up result: a command whose server died (not for memory) raises; the next one works."""
    pid = await _server_pid_on_host(sb)
    running = asyncio.create_task(sb.exec("sleep 10; echo finished"))
    await asyncio.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(SandboxError, match="exec server died"):
        await running
    assert (await sb.exec("echo again")).stdout == "again\n"
    assert await _server_pid_on_host(sb) != pid


async def test_a_server_that_cannot_start_leaves_commands_to_run_as_before(
    server_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sandbox whose server cannot start (no python3 on its PATH; the C server asked for and no
    compiler to build it) runs each command in a bwrap of its own, and says why."""
    monkeypatch.setattr("envhub.sandbox.local.BOOTSTRAP", ["no-such-python3", "-c", "pass"])
    monkeypatch.setattr(native, "_built", lambda: None)
    async with sandbox.open("local", policy=POLICY) as sb:
        r = await sb.exec("echo $$; echo fine")
        assert r.stdout == "2\nfine\n"  # pid 2 under bwrap's own init: a namespace of its own
        assert "unavailable" in sb.report().details["exec_server"]
        why = "no-such-python3" if server_kind == "python" else "install a C compiler"
        assert why in sb.report().details["exec_server"]


async def test_what_no_exec_can_carry_is_refused_on_the_host(sb: LocalSandbox) -> None:
    """A NUL inside an argument or a variable, or `=` in a variable's name, cannot reach a program
    (execve takes NUL-ended strings): refused before the request, and the server serves on."""
    for argv, env in ((["echo", "a\0b"], None), (["env"], {"A=B": "x"}), (["env"], {"X": "a\0b"})):
        with pytest.raises(SandboxError, match=r"NUL byte|not valid"):
            await sb.exec(argv, env=env)
    assert (await sb.exec(["sh", "-c", "echo $X"], env={"X": "ünï"})).stdout == "ünï\n"
