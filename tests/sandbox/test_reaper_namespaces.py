"""Owners in another PID namespace that share this /tmp, hostname and Docker engine (a container with host
networking and a shared /tmp does): their live sandboxes survive `envhub fleet reap` and another process's
automatic sweep of stale scratch areas, and what they leave when killed with `kill -9` is still reaped once
their owner lease expires (envhub.sandbox.owner: the rule every reaper applies)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import envhub.cli.fleet  # noqa: F401 - registers `envhub fleet`
from envhub.cli import app
from envhub.sandbox.fleet.reaper import find_orphans
from tests.sandbox.conftest import BACKENDS, DOCKER_IMAGE
from tests.sandbox.e2b_double import bwrap_missing

pytestmark = [
    pytest.mark.skipif(bwrap_missing() is not None, reason=bwrap_missing() or ""),
    pytest.mark.timeout(240),
]

VICTIM = """
    import asyncio, json, os, sys
    import envhub.sandbox as sandbox

    async def main():
        backend = sys.argv[1]
        policy = sandbox.IsolationPolicy(memory_mb=256, pids=64, disk_mb=64, wall_time_s=30)
        sb = await sandbox.open(backend, policy=policy, image=sys.argv[2] if backend == "docker" else None)
        note = f"{policy.workdir}/note.txt"
        await sb.write_file(note, "0")
        ref = str(sb._scratch) if backend == "local" else sb._container.id
        print(json.dumps({"pid": os.getpid(), "ref": ref}), flush=True)
        loop = asyncio.get_running_loop()
        n = 0
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "check":
            n += 1
            try:
                before = (await sb.read_file(note)).decode()
                await sb.write_file(note, str(n))
                r = await sb.exec("cat note.txt && echo ok")
                print(json.dumps({"before": before, "out": r.stdout, "rc": r.exit_code}), flush=True)
            except Exception as exc:
                print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        await sb.close()
        print(json.dumps({"closed": True}), flush=True)

    asyncio.run(main())
"""

START = """
import subprocess, sys
with open("/proc/sys/kernel/ns_last_pid", "w") as f:  # the victim's pid: one nobody has out here
    f.write(sys.argv[1])
sys.exit(subprocess.call([sys.executable, *sys.argv[2:]]))
"""


def free_pid() -> int:
    """A pid no process of this namespace has now: what a pid from another namespace looks like here.
    Drawn at random, so that two suites at once (make test-shared-host) rarely give theirs the same."""
    top = int(Path("/proc/sys/kernel/pid_max").read_text())
    rng = random.Random()
    for _ in range(10_000):
        pid = rng.randrange(top // 2, top - 1)
        if not Path(f"/proc/{pid}").exists():
            return pid
    raise AssertionError("no free pid in this namespace")


@dataclass
class Victim:
    proc: subprocess.Popen[str]
    pid: int
    """Its pid in its own namespace (what its sandbox is marked with); no process has it out here."""
    ref: str
    backend: str
    key: str
    """Its owner lease's key, as its sandbox names it."""

    def ask(self, line: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, f"the victim died (exit {self.proc.wait(30)})"
        return dict(json.loads(answer))

    def kill(self) -> None:
        """`kill -9` of the victim's namespace (its init, and with it every process in it)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


@contextlib.contextmanager
def victim(tmp_path: Path, backend: str, env: dict[str, str] | None = None) -> Iterator[Victim]:
    """An envhub process in a PID (and mount) namespace of its own, sharing this /tmp, hostname and
    Docker engine, with one live sandbox of `backend`."""
    script, start = tmp_path / "victim.py", tmp_path / "start.py"
    script.write_text(textwrap.dedent(VICTIM))
    start.write_text(START)
    pid = free_pid()
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    argv += [sys.executable, str(start), str(pid - 1), str(script), backend, DOCKER_IMAGE]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the victim died before opening its sandbox"
        opened = json.loads(line)
        assert opened["pid"] == pid and not Path(f"/proc/{pid}").exists()
        key = _owner_key(backend, opened["ref"])
        yield Victim(proc, pid, opened["ref"], backend, key)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
        if "opened" in locals():  # whatever a failed test or a killed victim left
            _remove(backend, opened["ref"], locals().get("key", ""))


def _owner_key(backend: str, ref: str) -> str:
    """The owner key a sandbox names (empty: an envhub without owner leases)."""
    if backend == "docker":
        import docker

        with contextlib.closing(docker.from_env()) as client:
            return str(client.containers.get(ref).labels.get("envhub.owner.key", ""))
    parts = Path(ref).name.split("-")  # envhub-sandbox-<pid>-<key>-<random>
    return parts[3] if len(parts) == 5 else ""


def _remove(backend: str, ref: str, key: str) -> None:
    if backend == "docker":
        import docker

        with contextlib.closing(docker.from_env()) as client, contextlib.suppress(docker.errors.NotFound):
            client.containers.get(ref).remove(force=True)
    else:
        from envhub.sandbox.scratch import remove_scratch

        remove_scratch(Path(ref))
    if key:
        Path(tempfile.gettempdir(), f"envhub-owner-{key}.lease").unlink(missing_ok=True)


def still_works(v: Victim) -> None:
    """The victim's sandbox kept its files and runs commands."""
    answer = v.ask("check")
    assert answer.get("before") == "0" and answer.get("out") == "1ok\n" and answer.get("rc") == 0, answer
    assert v.ask("done") == {"closed": True}
    assert v.proc.wait(60) == 0


def reap(owner: int, tmp_path: Path) -> str:
    result = CliRunner().invoke(
        app, ["fleet", "reap", "--owner", str(owner), "--lease-dir", str(tmp_path / "leases")]
    )
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_live_owner_in_another_pid_namespace_survives_fleet_reap(tmp_path: Path, backend: str) -> None:
    with victim(tmp_path, backend) as v:
        out = reap(v.pid, tmp_path)
        assert "removed" not in out, out
        still_works(v)


def test_a_live_owner_in_another_pid_namespace_survives_the_sweep_of_a_first_open(tmp_path: Path) -> None:
    """Another process's first local sandbox sweeps stale scratch areas: not this live one."""
    opener = textwrap.dedent("""
        import asyncio
        import envhub.sandbox as sandbox

        async def main():
            async with await sandbox.open("local") as sb:
                assert (await sb.exec("true")).exit_code == 0

        asyncio.run(main())
    """)
    with victim(tmp_path, "local") as v:
        subprocess.run([sys.executable, "-c", opener], check=True, timeout=120)
        assert Path(v.ref).is_dir()
        still_works(v)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_killed_owner_in_another_pid_namespace_is_reaped_once_its_lease_expires(
    tmp_path: Path, backend: str
) -> None:
    short = {"ENVHUB_FLEET": json.dumps({"lease_ttl_s": 2, "heartbeat_s": 0.5})}
    with victim(tmp_path, backend, short) as v:
        v.kill()
        deadline = time.monotonic() + 120
        while _exists(backend, v.ref) and not [
            o for o in find_orphans(None, providers=(backend,), owners={v.pid}) if o.ref == v.ref
        ]:  # (another suite's sweep at once may take it first: reaped all the same)
            assert time.monotonic() < deadline, "the killed owner's sandbox was never taken for an orphan"
            time.sleep(0.5)
        reap(v.pid, tmp_path)
        assert not _exists(backend, v.ref)


def _exists(backend: str, ref: str) -> bool:
    if backend == "local":
        return Path(ref).exists()
    import docker

    with contextlib.closing(docker.from_env()) as client:
        try:
            client.containers.get(ref)
        except docker.errors.NotFound:
            return False
    return True


def test_a_scratch_area_with_no_owner_lease_goes_only_once_a_day_old() -> None:
    """An older envhub's area names a pid only: a pid not seen here may live in another namespace."""
    from envhub.sandbox.owner import NO_LEASE_GRACE_S
    from envhub.sandbox.scratch import SCRATCH_PREFIX, why_stale

    path = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{free_pid()}-"))
    try:
        assert why_stale(path) is None
        later = time.time() + NO_LEASE_GRACE_S + 60
        assert "no lease" in (why_stale(path, now=later) or "")
    finally:
        path.rmdir()


def test_the_heartbeat_writes_back_an_owner_lease_someone_removed() -> None:
    from envhub.sandbox import owner

    me = owner.me(interval_s=0.2)
    lease = Path(tempfile.gettempdir(), owner.lease_name(me.key))
    lease.unlink()
    deadline = time.monotonic() + 60
    while owner.find_lease(me.key, []) is None:
        assert time.monotonic() < deadline, "the removed owner lease was never written again"
        time.sleep(0.05)
    assert owner.judge(me.key) == owner.ALIVE


def test_a_dead_owners_lease_stays_while_a_scratch_area_names_it(tmp_path: Path) -> None:
    """Another process's sweep of stale leases must not take a lease a scratch area still needs: the
    area's name carries only a pid and key, so without the lease its dead owner reads as unknown and the
    area waits a day (seen when two suites shared a host: one's sweep raced the other's reap)."""
    from envhub.sandbox import owner
    from envhub.sandbox.scratch import names_owner

    short = {"ENVHUB_FLEET": json.dumps({"lease_ttl_s": 2, "heartbeat_s": 0.5})}
    with victim(tmp_path, "local", short) as v:
        v.kill()
        lease = Path(tempfile.gettempdir(), owner.lease_name(v.key))
        long_stale = time.time() + owner.STALE_LEASE_KEEP_S + 600  # past the sweep's keep for any owner

        def in_use(key: str) -> bool:
            """Only this victim's lease may go: at a time this far on, every other lease of an owner in
            another PID namespace is stale too (another suite's victim, on a shared host, whose sandbox
            would then read as unknown and never be taken for an orphan)."""
            return key != v.key or names_owner(key)

        owner.sweep_stale_leases(now=long_stale, in_use=in_use)
        assert lease.exists() and names_owner(v.key)
        deadline = time.monotonic() + 120
        while _exists("local", v.ref) and not [
            o for o in find_orphans(None, providers=("local",), owners={v.pid}) if o.ref == v.ref
        ]:  # (another suite's sweep at once may take it first: reaped all the same)
            assert time.monotonic() < deadline, "the dead owner's area was never taken for an orphan"
            time.sleep(0.5)
        reap(v.pid, tmp_path)
        assert not _exists("local", v.ref) and not names_owner(v.key)
        owner.sweep_stale_leases(now=long_stale, in_use=in_use)
        assert not lease.exists()  # nothing names it any more: the lease goes
