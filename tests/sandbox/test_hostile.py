# ruff: noqa: ASYNC221, ASYNC240 - host-side checks are deliberately direct and synchronous
"""Hostile code against every available backend: each probe asserts containment and an unharmed host.

Every probe bounds itself (loop counts, socket timeouts) and runs under a sandbox timeout as well, so
a containment failure shows up as a failed assertion, never as a hung or damaged test machine.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy, Sandbox
from tests.sandbox.conftest import open_backend

PY = "python3"


async def py(sb: Sandbox, code: str, timeout: float = 15) -> tuple[str, str, int]:  # noqa: ASYNC109
    r = await sb.exec([PY, "-c", code], timeout=timeout)
    return r.stdout, r.stderr, r.exit_code


async def test_host_loopback_service_is_unreachable(sb: Sandbox) -> None:
    hits = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal hits
        hits += 1
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        out, _, _ = await py(
            sb,
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\n"
            "except OSError as e: print('refused', e)",
        )
        assert "CONNECTED" not in out and "refused" in out
        # The host's own service still answers: the probe changed nothing outside.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
    assert hits == 1


async def test_dns_and_external_network_fail(sb: Sandbox) -> None:
    out, _, _ = await py(
        sb,
        "import socket\n"
        "for target in [('pypi.org', 443), ('1.1.1.1', 53), ('8.8.8.8', 443)]:\n"
        "    try:\n"
        "        socket.create_connection(target, timeout=2); print('REACHED', target)\n"
        "    except OSError as e: print('blocked', target[0], type(e).__name__)\n"
        "print(sorted(i[1] for i in socket.if_nameindex()))",
    )
    assert "REACHED" not in out
    assert out.count("blocked") == 3
    assert "eth" not in out.splitlines()[-1]  # only loopback exists


_FINGERPRINT = (
    "import hashlib, os, sys\n"
    "p = sys.argv[1]\n"
    "try:\n"
    "    if os.path.isdir(p): print(sorted(os.listdir(p)))\n"
    "    else: print(hashlib.sha256(open(p, 'rb').read()).hexdigest())\n"
    "except OSError as e: print('denied')"
)


@pytest.mark.parametrize("path", ["/etc/shadow", "/etc/passwd", "/etc/ssh", "/root", "/home", "/var/log"])
async def test_host_files_are_invisible(sb: Sandbox, path: str) -> None:
    """Denied, absent, empty, or the image's own file: never the host's content."""
    r = await sb.exec([PY, "-c", _FINGERPRINT, path])
    host = subprocess.run([sys.executable, "-c", _FINGERPRINT, path], capture_output=True, text=True).stdout
    seen = r.stdout.strip()
    assert seen in ("denied", "[]") or seen != host.strip(), f"{path} shows the host's content: {seen}"


async def test_project_files_and_host_home_unless_bound(backend: str) -> None:
    project = Path(__file__).resolve()
    home = Path(os.path.expanduser("~"))
    probe = (
        "import os, sys\n"
        "for p in sys.argv[1:]:\n"
        "    try: open(p, 'rb').read(16); print('READ', p)\n"
        "    except OSError as e: print('denied', p, type(e).__name__)"
    )
    async with await open_backend(backend) as sb:
        r = await sb.exec([PY, "-c", probe, str(project), str(home / ".bashrc"), str(home / ".ssh/id_rsa")])
        assert "READ" not in r.stdout, r.stdout
    if backend != "local":
        return
    # Positive control: a read-only bind makes exactly that tree visible, and read-only.
    policy = IsolationPolicy(ro_binds={str(project.parent): "/project"})
    async with await open_backend(backend, policy) as sb:
        r = await sb.exec([PY, "-c", probe, f"/project/{project.name}"])
        assert f"READ /project/{project.name}" in r.stdout
        before = project.read_bytes()
        w = await sb.exec(["sh", "-c", f"echo x >> /project/{project.name}"])
        assert w.exit_code != 0
        assert project.read_bytes() == before


async def test_writes_outside_scratch_fail_and_never_reach_the_host(sb: Sandbox) -> None:
    marker = f"envhub-probe-{os.getpid()}"
    out, _, _ = await py(
        sb,
        "import os\n"
        f"for d in ['/usr', '/etc', '/', '/bin', '/proc/sys/kernel', '/sys', '/var/tmp']:\n"
        f"    p = os.path.join(d, {marker!r})\n"
        "    try: open(p, 'w').write('x'); print('WROTE', p)\n"
        "    except OSError as e: print('denied', p, type(e).__name__)\n"
        f"open('/tmp/{marker}', 'w').write('sandbox tmp is private')\n"
        "print('tmp ok')",
    )
    assert "WROTE" not in out, out
    assert "tmp ok" in out
    assert not (Path(tempfile.gettempdir()) / marker).exists()
    assert not Path("/tmp", marker).exists()
    assert not Path("/var/tmp", marker).exists()


async def test_disk_cap_is_total_not_per_file(backend: str) -> None:
    policy = IsolationPolicy(disk_mb=16, max_files=2000, wall_time_s=30)
    async with await open_backend(backend, policy) as sb:
        # Many 1 MiB files: each is under any per-file limit, together they exceed the cap.
        out, _, _ = await py(
            sb,
            "written = 0\n"
            "for i in range(64):\n"
            "    try:\n"
            "        with open(f'/work/f{i}', 'wb') as f: f.write(b'x' * (1 << 20))\n"
            "        written += 1\n"
            "    except OSError as e: print('stopped', type(e).__name__, e.errno); break\n"
            "print('files', written)",
        )
        assert "stopped" in out, out
        assert int(out.split("files")[-1]) <= 16
        # Many empty files: stopped by the inode cap, and /tmp + /dev/shm share the same budget.
        out, _, _ = await py(
            sb,
            "import os\n"
            "n = 0\n"
            "for i in range(5000):\n"
            "    try: open(f'/tmp/e{i}', 'w').close(); n += 1\n"
            "    except OSError as e: print('stopped', e.errno); break\n"
            "print('empty', n)\n"
            "try:\n"
            "    with open('/dev/shm/big', 'wb') as f: f.write(b'x' * (32 << 20)); print('SHM FILLED')\n"
            "except OSError as e: print('shm stopped', e.errno)",
        )
        assert "SHM FILLED" not in out, out
        assert "stopped" in out
        if backend == "local":
            assert int(out.split("empty")[1].split()[0]) < 2000
        # Still usable after being filled: free space and a command runs.
        r = await sb.exec("rm -f /work/f* /tmp/e* /dev/shm/big; echo alive")
        assert r.stdout.strip() == "alive"


async def test_fork_bomb_is_contained(backend: str) -> None:
    policy = IsolationPolicy(pids=32, wall_time_s=30)
    async with await open_backend(backend, policy) as sb:
        out, _, _ = await py(
            sb,
            "import os, time\n"
            "n = 0\n"
            "for _ in range(500):\n"
            "    try: pid = os.fork()\n"
            "    except OSError as e: print('fork refused', e.errno); break\n"
            "    if pid == 0: time.sleep(30); os._exit(0)\n"
            "    n += 1\n"
            "print('forked', n)",
            timeout=10,
        )
        assert "fork refused" in out, out
        assert int(out.split("forked")[-1]) <= 32
        # The sandbox's sleeping children died with the command; a new command can fork again.
        r = await sb.exec("for i in 1 2 3 4 5 6 7 8; do sleep 0 & done; wait; echo again")
        assert r.stdout.strip() == "again"
    # The host can still start processes.
    assert subprocess.run(["true"], check=False).returncode == 0


async def test_back_to_back_sandboxes_do_not_hit_eagain(backend: str) -> None:
    """Orphaned children must be reaped; otherwise the per-uid process count climbs to EAGAIN."""
    for _ in range(12):
        async with await open_backend(backend, IsolationPolicy(pids=16)) as sb:
            r = await sb.exec("for i in 1 2 3 4 5 6; do (sleep 0.2 &) ; done; echo ok")
            assert r.stdout.strip() == "ok", r.stderr


async def test_memory_bomb_is_killed_or_refused(backend: str) -> None:
    policy = IsolationPolicy(memory_mb=128, wall_time_s=30)
    async with await open_backend(backend, policy) as sb:
        r = await sb.exec(
            [
                PY,
                "-c",
                "chunks = []\nfor i in range(256):\n    chunks.append(bytearray(16 << 20))\nprint('ALL')",
            ],
            timeout=20,
        )
        assert "ALL" not in r.stdout
        assert r.oom_killed or "MemoryError" in r.stderr or r.exit_code != 0
        if backend == "local":
            assert r.peak_memory_bytes is not None and r.peak_memory_bytes <= 128 * (1 << 20) + (1 << 20)
        assert (await sb.exec("echo alive")).stdout.strip() == "alive"


async def test_cpu_loop_times_out_and_everything_dies(sb: Sandbox) -> None:
    r = await sb.exec(
        [PY, "-c", "import os\nfor _ in range(3):\n    os.fork()\nwhile True: pass"],
        timeout=1.5,
    )
    assert r.timed_out and r.exit_code == -1
    assert not r.ok
    # Nothing of the loop survives: no process in the sandbox is still running it.
    ps = await sb.exec(
        [
            PY,
            "-c",
            "import os\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n"
            "        try: print(open(f'/proc/{p}/cmdline', 'rb').read().replace(bytes(1), b' ').decode())\n"
            "        except OSError: pass",
        ]
    )
    assert "while True" not in ps.stdout, ps.stdout


async def test_cannot_kill_host_processes(sb: Sandbox) -> None:
    victim = await asyncio.create_subprocess_exec("sleep", "60")
    try:
        await py(
            sb,
            "import os, signal\n"
            f"try: os.kill({victim.pid}, signal.SIGKILL); print('KILLED?')\n"
            "except OSError as e: print('no such process here', e.errno)\n"
            "try: os.kill(-1, signal.SIGKILL)\n"
            "except OSError as e: print('kill -1', e.errno)\n",
        )
        await asyncio.sleep(0.2)
        assert victim.returncode is None, "a host process was killed from inside the sandbox"
        os.kill(victim.pid, 0)  # raises ProcessLookupError if the victim is gone
    finally:
        victim.kill()
        await victim.wait()


async def test_host_environment_does_not_leak(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_PROBE_SECRET", "hunter2")
    policy = IsolationPolicy(env={"TASK_VAR": "declared"})
    async with await open_backend(backend, policy) as sb:
        r = await sb.exec("env", env={"CALL_VAR": "per-call"})
        assert "hunter2" not in r.stdout
        assert "TASK_VAR=declared" in r.stdout and "CALL_VAR=per-call" in r.stdout


async def test_nested_namespaces_are_refused(sb: Sandbox) -> None:
    r = await sb.exec(
        "unshare --user --map-root-user true && echo USERNS;"
        " unshare --net true && echo NETNS;"
        " unshare --mount true && echo MOUNTNS;"
        " (command -v bwrap >/dev/null && bwrap --ro-bind / / true && echo BWRAP); echo done"
    )
    assert "done" in r.stdout
    for escape in ("USERNS", "NETNS", "MOUNTNS", "BWRAP"):
        assert escape not in r.stdout, r.stdout


async def test_ptrace_is_refused(sb: Sandbox) -> None:
    out, _, _ = await py(
        sb,
        "import ctypes, os, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(5); os._exit(0)\n"
        "rc = libc.ptrace(16, child, 0, 0)  # PTRACE_ATTACH\n"
        "print('attach', rc, ctypes.get_errno())\n"
        "os.kill(child, 9); os.waitpid(child, 0)\n",
    )
    assert "attach -1" in out, out


async def test_host_is_still_healthy_after_the_suite(sb: Sandbox) -> None:
    """A canary after the probes: the host resolves its own loopback and runs processes."""
    assert socket.gethostname()
    assert subprocess.run(["true"], check=False).returncode == 0
    r = await sb.exec("echo canary")
    assert r.stdout.strip() == "canary"


# -- host-side waits: nothing the sandbox holds may stall the host ---------------------------------------

DEEP = 5000
_DEEP_TREE = (
    "import os, sys\n"
    "os.chdir(sys.argv[1])\n"
    "for _ in range(int(sys.argv[2])):\n"
    "    os.mkdir('d'); os.chdir('d')\n"  # relative steps: the full path is far past PATH_MAX
    "open('leaf', 'w').write('bottom')\n"
    "print('deep')"
)


async def _make_deep_tree(sb: Sandbox, under: str, depth: int = DEEP) -> None:
    r = await sb.exec([PY, "-c", _DEEP_TREE, under, str(depth)], timeout=60)
    assert r.stdout.strip() == "deep", r.stderr


@pytest.mark.timeout(180)
async def test_a_tree_deeper_than_path_max_breaks_no_download_reset_or_close(
    backend: str, tmp_path: Path
) -> None:
    """5000 nested directories: past Python's recursion limit and PATH_MAX, on host-side walks."""
    async with await open_backend(backend, IsolationPolicy(wall_time_s=60)) as sb:
        await sb.exec("mkdir -p /work/deep /work/shallow /tmp/deep", timeout=10)
        await _make_deep_tree(sb, "/work/deep")
        await _make_deep_tree(sb, "/work/shallow", depth=50)
        # Too deep to copy out: refused with a clear error, not a crash of the host-side walk.
        with pytest.raises(OSError, match="deeper than"):
            await sb.download("deep", tmp_path / "deep")
        await sb.download("shallow", tmp_path / "shallow")
        assert (tmp_path / "shallow" / Path(*["d"] * 50) / "leaf").read_text() == "bottom"
        assert (await sb.exec("echo alive", timeout=10)).stdout == "alive\n"
        if backend == "local":  # the only backend that recycles
            await _make_deep_tree(sb, "/tmp/deep")
            await sb.reset()
            r = await sb.exec("ls -A /work /tmp", timeout=10)
            assert r.stdout.split() == ["/tmp:", "/work:"]
            await sb.exec("mkdir /work/again", timeout=10)
            await _make_deep_tree(sb, "/work/again")
    # Closed with the tree in place: the leak check of every test sees no scratch directory left.


@pytest.mark.timeout(120)
async def test_named_pipes_at_host_file_paths_are_refused_not_waited_on(sb: Sandbox, tmp_path: Path) -> None:
    """Nothing ever opens the other end: a host read, write or copy that opens the pipe waits forever."""
    r = await sb.exec("mkfifo /work/pipe && mkdir /work/d && mkfifo /work/d/pipe && echo ok > /work/d/f")
    assert r.ok, r.stderr
    for path in ("pipe", "d/pipe", "/work/d/pipe"):
        with pytest.raises(OSError, match="named pipe"):
            await sb.read_file(path)
        with pytest.raises(OSError, match="named pipe"):
            await sb.write_file(path, b"x" * (1 << 20))  # more than a pipe buffer holds
        with pytest.raises(OSError, match="named pipe"):
            await sb.download(path, tmp_path / "out")
    # Inside a downloaded tree a pipe is skipped, like a symlink; the regular file comes out.
    await sb.download("d", tmp_path / "d")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["f"]
    assert (await sb.exec("echo alive", timeout=10)).stdout == "alive\n"


@pytest.mark.timeout(120)
async def test_stdin_the_command_never_reads_cannot_block_the_host(sb: Sandbox) -> None:
    """4 MiB of stdin to a command that never reads it: the write must end with the command's timeout."""
    r = await sb.exec(["sleep", "30"], stdin=b"x" * (4 << 20), timeout=2)
    assert r.timed_out and r.exit_code == -1
    # The same through a write path an agent can set up: a shell redirection into a pipe nobody reads.
    await sb.exec("mkfifo /work/pipe", timeout=10)
    r = await sb.exec(["sh", "-c", "cat > /work/pipe"], stdin=b"x" * (4 << 20), timeout=2)
    assert r.timed_out
    assert (await sb.exec("echo alive", timeout=10)).stdout == "alive\n"


@pytest.mark.timeout(120)
async def test_a_worker_that_stops_itself_cannot_block_the_host() -> None:
    """The interpreter SIGSTOPs itself after replying; the next request is bigger than a pipe buffer."""
    async with sandbox.open("local", policy=IsolationPolicy(wall_time_s=20)) as sb, await sb.python() as py:
        r = await py.run(
            "import os, signal, threading\n"
            "threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGSTOP)).start()"
        )
        assert r.ok, r.stderr
        await asyncio.sleep(1)
        r = await py.run("x = 1\n" + "#" * (1 << 20), timeout=2)
        assert r.timed_out and r.session_lost
        assert (await py.run("1 + 1")).stdout == "2\n"
        assert py.restarts == 1


_FLOOD_PROTOCOL = (
    "import fcntl, os, threading, time\n"
    "def flood():\n"
    "    time.sleep(0.5)\n"
    "    for fd in map(int, os.listdir('/proc/self/fd')):\n"
    "        try:\n"
    "            is_pipe = os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:')\n"
    "        except OSError:\n"
    "            continue\n"
    "        if is_pipe and fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:\n"
    "            os.write(fd, b'x' * (16 << 20))  # the reply channel: no newline, ever\n"
    "threading.Thread(target=flood, daemon=True).start()"
)


@pytest.mark.timeout(120)
async def test_a_worker_that_floods_its_reply_channel_is_restarted() -> None:
    """Snippet code writes megabytes without a newline into the protocol: the host must not choke on it."""
    async with sandbox.open("local", policy=IsolationPolicy(wall_time_s=20)) as sb, await sb.python() as py:
        assert (await py.run(_FLOOD_PROTOCOL)).ok
        await asyncio.sleep(1.5)
        r = await py.run("1 + 1", timeout=2)
        assert r.session_lost and not r.ok
        assert (await py.run("1 + 1")).stdout == "2\n"
        assert py.restarts == 1
