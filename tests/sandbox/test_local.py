"""The local (bubblewrap) backend: the Sandbox contract, files, the persistent worker, the report."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy, IsolationReport, SandboxError, seccomp
from envhub.sandbox.base import sandbox_path
from envhub.sandbox.scratch import remove_tree


async def test_exec_argv_shell_stdin_env_and_cwd() -> None:
    async with sandbox.open("local", policy=IsolationPolicy(env={"A": "1"})) as sb:
        r = await sb.exec(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], stdin="hello")
        assert r.ok and r.stdout == "HELLO\n"
        r = await sb.exec("echo $A $B; pwd; exit 3", env={"B": "2"})
        assert r.stdout == "1 2\n/work\n" and r.exit_code == 3 and not r.ok
        await sb.write_file("sub/x.txt", "in sub")
        r = await sb.exec("cat x.txt", cwd="sub")
        assert r.stdout == "in sub"
        assert r.wall_time_s > 0 and r.cpu_time_s is not None and r.peak_memory_bytes


async def test_signal_exit_code_and_output_cap() -> None:
    async with sandbox.open("local", policy=IsolationPolicy(max_output_bytes=4096)) as sb:
        r = await sb.exec("kill -9 $$")
        assert r.exit_code == 137
        r = await sb.exec(["python3", "-c", "print('x' * 100000)"])
        assert r.output_truncated and len(r.stdout) == 4096 and r.exit_code == 0


async def test_files_round_trip(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("VALUE = 7\n")
    (src / "run.py").write_text("from pkg.mod import VALUE\nopen('out.txt', 'w').write(str(VALUE * 6))\n")
    async with sandbox.open("local") as sb:
        await sb.upload_dir(src, "proj")
        r = await sb.exec("python3 run.py", cwd="proj")
        assert r.ok, r.stderr
        assert await sb.read_file("proj/out.txt") == b"42"
        assert await sb.read_file("/work/proj/out.txt") == b"42"
        await sb.write_file("/tmp/bin.dat", bytes(range(256)))
        assert await sb.read_file("/tmp/bin.dat") == bytes(range(256))
        await sb.download("proj", tmp_path / "back")
        assert (tmp_path / "back" / "out.txt").read_text() == "42"
        assert (tmp_path / "back" / "pkg" / "mod.py").read_text() == "VALUE = 7\n"
        # Outside the writable area, reads go through the sandbox with its rights; writes are refused.
        assert b"Debian" in await sb.read_file("/usr/lib/os-release")
        with pytest.raises(PermissionError):
            await sb.write_file("/usr/evil", "x")
        with pytest.raises(FileNotFoundError):
            await sb.read_file("missing.txt")
        # Files written from the host belong to the sandbox user, so the sandbox can edit them.
        r = await sb.exec("echo more >> proj/out.txt && cat proj/out.txt")
        assert r.stdout == "42more\n"


async def test_symlinks_planted_by_the_sandbox_do_not_lead_the_host_out(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host only")
    async with sandbox.open("local") as sb:
        await sb.exec(f"ln -s {secret} link; mkdir d; ln -s {tmp_path} dirlink; ln -s /etc/shadow shadow")
        for path in ("link", "shadow", "dirlink/host-secret"):
            with pytest.raises(OSError):  # noqa: PT011 - ELOOP / ENOTDIR / permission, all refusals
                await sb.read_file(path)
        with pytest.raises(OSError):  # noqa: PT011
            await sb.write_file("dirlink/planted", "x")
        await sb.download(".", tmp_path / "out")
        assert not (tmp_path / "out" / "link").exists()
    assert secret.read_text() == "host only"
    assert not (tmp_path / "planted").exists()


def test_sandbox_paths_cannot_climb_out() -> None:
    assert str(sandbox_path("a/../b", "/work")) == "/work/b"
    assert str(sandbox_path("/tmp/x", "/work")) == "/tmp/x"
    with pytest.raises(ValueError, match="climbs above"):
        sandbox_path("../../..", "/work")


async def test_state_persists_between_execs_and_reset_wipes_it() -> None:
    async with sandbox.open("local") as sb:
        await sb.exec("echo kept > state.txt")
        assert (await sb.exec("cat state.txt")).stdout == "kept\n"
        await sb.reset()
        assert (await sb.exec("ls -A /work /tmp")).stdout.split() == ["/tmp:", "/work:"]


async def test_closed_sandbox_refuses_work() -> None:
    sb = await sandbox.open("local")
    await sb.close()
    await sb.close()  # idempotent
    with pytest.raises(SandboxError, match="closed"):
        await sb.exec("true")


async def test_cancelling_an_exec_kills_its_processes() -> None:
    async with sandbox.open("local") as sb:
        task = asyncio.create_task(sb.exec("sleep 30 & sleep 30"))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert sb._slot.pids() == []  # type: ignore[attr-defined]


async def test_report_says_what_is_enforced_and_how() -> None:
    policy = IsolationPolicy(memory_mb=300, pids=40, cpus=0.5, disk_mb=32)
    async with sandbox.open("local", policy=policy) as sb:
        report = sb.report()
    assert isinstance(report, IsolationReport)
    assert report.backend == "local" and report.policy == policy
    assert report.fully_enforced, report.unenforced()
    assert "300 MiB" in report.controls["memory"].how
    assert "loopback only" in report.controls["network"].how
    assert "size=32 MiB" in report.controls["disk"].how
    assert report.details["uid"] != "0"
    # The report round-trips through JSON: it is stored with each episode.
    assert IsolationReport.model_validate_json(report.model_dump_json()) == report


async def test_policy_limits_reach_the_cgroup() -> None:
    async with sandbox.open("local", policy=IsolationPolicy(memory_mb=300, pids=40, cpus=0.5)) as sb:
        slot = sb._slot  # type: ignore[attr-defined]
        assert (slot.cgroups["memory"] / "memory.limit_in_bytes").read_text().strip() == str(300 << 20)
        assert (slot.cgroups["pids"] / "pids.max").read_text().strip() == "42"
        assert (slot.cgroups["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        r = await sb.exec("cat /proc/self/status | grep -E '^(Uid|CapEff|Seccomp|NoNewPrivs)'")
    fields = dict(line.split(":", 1) for line in r.stdout.splitlines())
    assert fields["Uid"].split()[0] == str(slot.uid) != "0"
    assert int(fields["CapEff"], 16) == 0
    assert fields["Seccomp"].strip() == "2"


def test_missing_bubblewrap_fails_loudly() -> None:
    """A machine without bwrap: a fresh interpreter with an empty PATH must refuse, never run unsandboxed."""
    code = "import asyncio, envhub.sandbox as s; asyncio.run(s.open('local').__aenter__())"
    env = {**os.environ, "PATH": "/nonexistent", "ENVHUB_BWRAP": "/nonexistent/bwrap"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "SandboxUnavailable" in result.stderr and "apt-get install bubblewrap" in result.stderr


async def test_unknown_backend_and_image_on_local_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        await sandbox.open("chroot")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="takes no image"):
        await sandbox.open("local", image="python:3")


async def test_auto_picks_local_without_e2b_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)
    async with sandbox.open("auto") as sb:
        assert sb.backend == "local"


def test_seccomp_program_shape() -> None:
    prog = seccomp.program()
    assert len(prog) % 8 == 0 and len(prog) // 8 == 7 + len(set(seccomp.DENIED_X86_64.values()))
    fd = seccomp.memfd()
    try:
        assert os.read(fd, 1 << 16) == prog
    finally:
        os.close(fd)


async def test_seccomp_can_be_disabled_and_report_says_so() -> None:
    async with sandbox.open("local", policy=IsolationPolicy(seccomp=False)) as sb:
        r = await sb.exec("grep ^Seccomp: /proc/self/status")
        assert not sb.report().controls["seccomp"].enforced
    assert r.stdout.split()[-1] == "0"


def test_policy_validation() -> None:
    with pytest.raises(ValueError, match="workdir"):
        IsolationPolicy(workdir="relative")
    with pytest.raises(ValueError, match="absolute"):
        IsolationPolicy(ro_binds={"rel": "/x"})
    with pytest.raises(ValueError, match="extra"):
        IsolationPolicy(netwrok=True)  # type: ignore[call-arg]
    assert IsolationPolicy().digest() == IsolationPolicy().digest() != IsolationPolicy(pids=5).digest()


# -- persistent worker ----------------------------------------------------------------------------------


async def test_worker_keeps_state_and_prints_last_expression() -> None:
    async with sandbox.open("local") as sb, await sb.python() as py:
        assert (await py.run("x = 41")).stdout == ""
        r = await py.run("x + 1")
        assert r.stdout == "42\n" and r.ok
        r = await py.run("import os\nos.system('echo from-a-child')\nprint('and python')")
        assert r.stdout == "from-a-child\nand python\n"
        r = await py.run("1 / 0")
        assert r.exit_code == 1 and "ZeroDivisionError" in r.stderr and "<cell" in r.stderr
        assert (await py.run("x")).stdout == "41\n"  # an exception does not lose the session
        r = await py.run("raise SystemExit(4)")
        assert r.exit_code == 4 and (await py.run("x")).stdout == "41\n"


async def test_worker_timeout_interrupts_without_losing_the_session() -> None:
    async with sandbox.open("local") as sb, await sb.python() as py:
        await py.run("state = 'kept'")
        r = await py.run("while True: pass", timeout=0.5)
        assert r.timed_out and not r.session_lost and "TimeoutError" in r.stderr
        r = await py.run(
            "try:\n    import time; time.sleep(5)\nexcept Exception:\n    print('swallowed')", timeout=0.5
        )
        assert r.timed_out and "swallowed" not in r.stdout
        assert (await py.run("state")).stdout == "'kept'\n"
        assert py.restarts == 0


async def test_worker_killed_when_the_snippet_ignores_the_interrupt() -> None:
    async with sandbox.open("local") as sb, await sb.python() as py:
        await py.run("state = 1")
        # Stuck in C code: the interrupt cannot be delivered, so the interpreter must be killed.
        r = await py.run("sum(range(10**12))", timeout=0.3)
        assert r.timed_out and r.session_lost
        r = await py.run("'state' in globals()")
        assert r.stdout == "False\n" and py.restarts == 1


async def test_worker_death_is_reported_and_the_next_call_restarts() -> None:
    async with sandbox.open("local", policy=IsolationPolicy(memory_mb=128)) as sb, await sb.python() as py:
        r = await py.run("import os; os._exit(3)")
        assert r.session_lost and r.exit_code == 3
        r = await py.run("b = bytearray(512 << 20)", timeout=10)
        assert r.session_lost or "MemoryError" in r.stderr
        assert (await py.run("1 + 1")).stdout == "2\n"


async def test_worker_and_exec_share_the_writable_area() -> None:
    async with sandbox.open("local") as sb, await sb.python() as py:
        await py.run("open('/work/from_repl.txt', 'w').write('hi')")
        assert (await sb.exec("cat from_repl.txt")).stdout == "hi"


async def test_closing_the_sandbox_stops_the_worker() -> None:
    sb = await sandbox.open("local")
    py = await sb.python()
    await py.run("x = 1")
    await sb.close()
    assert not py.alive


async def test_parallel_writes_into_a_new_folder_all_succeed() -> None:
    async with sandbox.open("local") as sb:
        await asyncio.gather(*(sb.write_file(f"new/dir/f{i}.txt", str(i)) for i in range(40)))
        listing = await sb.exec("ls /work/new/dir | wc -l", timeout=10)
        assert listing.stdout.strip() == "40"


def test_scratch_left_by_a_killed_process_is_swept_by_the_next_one(own_temp_dir: Path) -> None:
    """A host process SIGKILLed mid-sandbox cannot clean up; the next envhub process must. Both use
    `own_temp_dir`, where no other envhub process on the host sweeps first."""
    env = {**os.environ, "TMPDIR": str(own_temp_dir)}
    code = (
        "import asyncio, os, envhub.sandbox as s\n"
        "async def main():\n"
        "    sb = await s.open('local')\n"
        "    print(sb._scratch, flush=True)\n"
        "    os.kill(os.getpid(), 9)\n"
        "asyncio.run(main())\n"
    )
    killed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    leftover = Path(killed.stdout.strip())
    assert killed.returncode == -9 and leftover.is_dir()
    sweep = (
        "import asyncio, envhub.sandbox as s\n"
        "async def main():\n"
        "    async with s.open('local'): pass\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", sweep], check=True, timeout=60, env=env)
    assert not leftover.exists()
    assert str(leftover) not in Path("/proc/self/mounts").read_text()


def test_scratch_removal_handles_any_depth_unreadable_dirs_and_planted_links(tmp_path: Path) -> None:
    """The cleanup used where no tmpfs can be swapped (not root): iterative, never through a symlink."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file")
    area = tmp_path / "area"
    area.mkdir()
    fd = os.open(area, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(3000):  # past the recursion limit and PATH_MAX
            os.mkdir("d", dir_fd=fd)
            fd, parent = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
            os.close(parent)
        os.symlink(str(outside), "link", dir_fd=fd)
        os.mkdir("locked", dir_fd=fd)
        os.mkdir("locked/inner", dir_fd=fd)
        os.chmod("locked", 0, dir_fd=fd)
    finally:
        os.close(fd)
    for i in range(50):  # wide as well as deep, with names the hoisting may collide with
        (area / f".envhub-rm-{i}").mkdir()
        (area / f".envhub-rm-{i}" / "f").write_text("x")
    remove_tree(area, deadline=time.monotonic() + 120)
    assert not area.exists()
    assert (outside / "keep.txt").read_text() == "host file"


def test_writable_image_is_refused_on_the_local_backend() -> None:
    """An option only Docker can honour must be refused, never silently ignored."""
    with pytest.raises(ValueError, match="only the docker backend has"):
        asyncio.run(sandbox.open("local", policy=sandbox.IsolationPolicy(writable_image=True)).__aenter__())
