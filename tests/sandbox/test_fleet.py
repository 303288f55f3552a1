"""The sandbox fleet with real sandboxes: quotas and failover, rate limits, leases and their heartbeat,
and the reaper after `kill -9` of an owner process (envhub.sandbox.fleet)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import envhub.cli.fleet  # noqa: F401 - registers `envhub fleet` (the lead adds it to envhub.cli)
import envhub.sandbox as sandbox
from envhub.cli import app
from envhub.record import tape as tapes
from envhub.sandbox import IsolationPolicy, Sandbox, SandboxUnavailable, owner
from envhub.sandbox.backends import create
from envhub.sandbox.fleet import Fleet, FleetConfig, LeaseBook, Provider, TokenBucket
from envhub.sandbox.fleet.reaper import find_orphans, reap
from envhub.settings import settings
from tests.envhub_testkit.leaks import descendants
from tests.sandbox.conftest import _DOCKER_SKIP, DOCKER_IMAGE
from tests.sandbox.e2b_double import E2BDouble, bwrap_missing, serving

pytestmark = [
    pytest.mark.skipif(bwrap_missing() is not None, reason=bwrap_missing() or ""),
    pytest.mark.timeout(180),
]
needs_docker = pytest.mark.skipif(_DOCKER_SKIP is not None, reason=_DOCKER_SKIP or "")
POLICY = IsolationPolicy(memory_mb=256, pids=64, wall_time_s=30)


def config(tmp_path: Path, *providers: Provider, **kw: Any) -> FleetConfig:
    return FleetConfig(providers=providers, lease_dir=tmp_path / "leases", **kw)


async def close_all(boxes: list[Sandbox]) -> None:
    await asyncio.gather(*(b.close() for b in boxes))


# -- limits ----------------------------------------------------------------------------------------


def test_token_bucket_spreads_creations_by_its_rate() -> None:
    now = [100.0]
    bucket = TokenBucket(rate=2.0, burst=2, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(5)] == [0.0, 0.0, 0.5, 1.0, 1.5]  # the burst, then 1 per 0.5 s
    now[0] += 10.0  # a quiet spell refills the bucket only up to its burst
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.5]


def test_config_from_env_toml_and_refusals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "fleet.toml"
    toml.write_text(
        'when_full = "wait"\n[[providers]]\nname = "docker"\nmax_concurrent = 3\nrate_per_s = 2.5\n'
    )
    monkeypatch.setenv("ENVHUB_FLEET", str(toml))
    loaded = FleetConfig.from_env()
    assert loaded.when_full == "wait" and loaded.providers == (
        Provider(name="docker", max_concurrent=3, rate_per_s=2.5),
    )
    monkeypatch.setenv("ENVHUB_FLEET", '{"providers": [{"name": "local"}, {"name": "local"}]}')
    with pytest.raises(ValueError, match="listed twice"):
        FleetConfig.from_env()
    with pytest.raises(ValueError, match="heartbeat_s"):
        FleetConfig(lease_ttl_s=1, heartbeat_s=2)


# -- quotas and failover -----------------------------------------------------------------------------


@needs_docker
async def test_the_open_past_a_full_quota_fails_over_in_order(tmp_path: Path) -> None:
    fleet = Fleet(config(tmp_path, Provider(name="local", max_concurrent=2), Provider(name="docker")))
    boxes = [await fleet.open(POLICY, options={}) for _ in range(3)]
    try:
        assert [b.report().backend for b in boxes] == ["local", "local", "docker"]
        assert [(await b.exec("echo ok")).stdout for b in boxes] == ["ok\n"] * 3
        assert fleet.quotas["local"].in_use == 2 and fleet.quotas["docker"].in_use == 1
        assert not fleet.failures  # a full quota is not a failure
        await boxes[0].close()  # room again on local: the next open goes there
        boxes.append(await fleet.open(POLICY))
        assert boxes[-1].report().backend == "local"
    finally:
        await close_all(boxes)
        fleet.close()
    assert all(q.in_use == 0 for q in fleet.quotas.values()) and fleet.book.leases() == []


async def test_when_full_wait_queues_the_open_until_one_closes(tmp_path: Path) -> None:
    fleet = Fleet(
        config(tmp_path, Provider(name="local", max_concurrent=1), Provider(name="docker"), when_full="wait")
    )
    first = await fleet.open(POLICY)
    second = asyncio.create_task(fleet.open(POLICY))
    try:
        await asyncio.sleep(1.0)
        assert not second.done(), "the open past a full quota should wait, not fail over"
        await first.close()
        got = await asyncio.wait_for(second, 60)
        assert got.report().backend == "local" and fleet.opened == {"local": 2}
        await got.close()
    finally:
        second.cancel()
        await first.close()
        fleet.close()


async def test_a_quota_shared_through_the_lease_directory_counts_every_fleet(tmp_path: Path) -> None:
    """Two fleets (as two processes of a host would) writing leases to one directory share local's
    quota of 1: the second one's open waits until the first one's sandbox closes."""
    shared = config(
        tmp_path, Provider(name="local", max_concurrent=1), quota_scope="lease_dir", when_full="wait"
    )
    one, other = Fleet(shared), Fleet(shared)
    first = await one.open(POLICY)
    second = asyncio.create_task(other.open(POLICY))
    try:
        await asyncio.sleep(1.5)
        assert not second.done(), "the other fleet did not count this one's lease"
        await first.close()
        got = await asyncio.wait_for(second, 60)
        (lease,) = other.book.leases()
        assert lease.ref == got._scratch.as_posix()  # type: ignore[attr-defined]  # the pending lease, filled in
        await got.close()
    finally:
        second.cancel()
        with contextlib.suppress(BaseException):
            await (await second).close()  # opened too early, on a failure: closed all the same
        await first.close()
        one.close()
        other.close()
    assert other.book.leases() == []


def test_a_pending_lease_of_a_dead_owner_is_removed(tmp_path: Path) -> None:
    """An owner killed while its sandbox was being made leaves a lease with no ref: only the file goes."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    book = LeaseBook(tmp_path, ttl_s=30)
    pending = book.grant("docker", "").model_copy(update={"owner_pid": dead.pid, "owner_started": 0})
    book.record(pending)
    (orphan,) = find_orphans(book, providers=("docker",), owners={dead.pid})
    assert orphan.kind == "pending" and "dead" in orphan.why
    assert reap([orphan], book) == {orphan: None} and book.leases() == []


async def test_a_provider_that_refuses_is_skipped_and_every_refusal_is_reported(tmp_path: Path) -> None:
    """An image rules out local; e2b has no key here: the error names each provider's reason."""
    fleet = Fleet(config(tmp_path, Provider(name="local"), Provider(name="e2b")))
    os.environ.pop("E2B_API_KEY", None)
    with pytest.raises(SandboxUnavailable) as caught:
        await fleet.open(POLICY, image="some/image")
    message = str(caught.value)
    assert "local: the local backend" in message and "e2b: SandboxUnavailable" in message
    assert fleet.quotas["e2b"].in_use == 0 and fleet.failures and fleet.book.leases() == []


async def test_open_fleet_through_the_public_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import envhub.sandbox.fleet.scheduler as scheduler

    monkeypatch.setenv(
        "ENVHUB_FLEET", json.dumps({"providers": [{"name": "local"}], "lease_dir": str(tmp_path)})
    )
    monkeypatch.setattr(scheduler, "_shared", None)
    async with sandbox.open("fleet", policy=POLICY) as sb:
        assert sb.report().backend == "local" and (await sb.exec("echo hi")).stdout == "hi\n"
        assert len(LeaseBook(tmp_path, 30).leases()) == 1
    assert LeaseBook(tmp_path, 30).leases() == []
    scheduler.shared_fleet().close()


async def test_a_fork_of_a_fleet_sandbox_is_leased_and_counted(tmp_path: Path) -> None:
    fleet = Fleet(config(tmp_path, Provider(name="local", max_concurrent=1)))
    parent = await fleet.open(POLICY)
    try:
        await parent.write_file("state.txt", "kept")
        child = await parent.fork()  # past the quota of 1: a fork has nowhere else to go
        assert await child.read_file("state.txt") == b"kept" and child.report().backend == "local"
        assert fleet.quotas["local"].in_use == 2 and len(fleet.book.leases()) == 2
        await child.close()
        assert fleet.quotas["local"].in_use == 1 and len(fleet.book.leases()) == 1
    finally:
        await parent.close()
        fleet.close()
    assert fleet.quotas["local"].in_use == 0 and fleet.book.leases() == []


async def test_a_fleet_sandbox_is_held_by_its_class_level_calls_beside_the_tape(tmp_path: Path) -> None:
    """The fleet's lease and the tape are interceptors of the same class-level calls
    (envhub.sandbox.intercept): a close reached through the class gives the lease back too, the sandbox
    keeps its class's own methods, and a recorded episode's calls on it are kept as on any sandbox."""
    fleet = Fleet(config(tmp_path, Provider(name="local", max_concurrent=1)))
    try:
        with tapes.using(tapes.Tape("record")) as tape:
            box = await fleet.open(POLICY)
            assert "close" not in vars(box) and "fork" not in vars(box)
            assert (await box.exec("echo hi")).stdout == "hi\n"
            await type(box).close(box)  # as a backend's own code or a generic helper reaches it
        assert fleet.quotas["local"].in_use == 0 and fleet.book.leases() == []
        assert [call.method for call in tape.calls if call.method == "exec"] == ["exec"]
    finally:
        await box.close()
        fleet.close()


# -- rate limits -------------------------------------------------------------------------------------


async def test_creations_are_spread_by_the_rate_limit(tmp_path: Path) -> None:
    """Four opens at once under 4/s (burst 1): the k-th creation starts at least k/rate after the first
    (a lower bound: a loaded host only makes it later), and all four are made."""
    started: list[float] = []

    async def recording(
        backend: Any, policy: IsolationPolicy, image: str | None, options: dict[str, Any]
    ) -> Sandbox:
        started.append(time.monotonic())
        return await create(backend, policy, image, options)

    fleet = Fleet(config(tmp_path, Provider(name="local", rate_per_s=4.0)), create=recording)
    boxes = await asyncio.gather(*(fleet.open(POLICY) for _ in range(4)))
    try:
        assert len(started) == 4 and fleet.opened == {"local": 4}
        after_first = [t - started[0] for t in started]
        assert all(after >= k / 4.0 - 0.02 for k, after in enumerate(after_first)), after_first
    finally:
        await close_all(list(boxes))
        fleet.close()


# -- leases ------------------------------------------------------------------------------------------


async def test_a_lease_is_written_its_owner_lease_beats_and_it_is_released(tmp_path: Path) -> None:
    """One heartbeat per process: the owner lease (in the lease dir too) is touched, not each lease."""
    fleet = Fleet(config(tmp_path, Provider(name="local"), lease_ttl_s=5, heartbeat_s=0.2))
    sb = await fleet.open(POLICY)
    try:
        (lease,) = fleet.book.leases()
        assert lease.owner_pid == os.getpid() and lease.provider == "local" and lease.owner is not None
        assert lease.ref.startswith(os.path.join(tempfile.gettempdir(), "envhub-sandbox-"))
        assert lease.owner in lease.ref  # the scratch area names its owner too
        owner_lease = fleet.book.directory / owner.lease_name(lease.owner)
        beat = owner_lease.stat().st_mtime
        for _ in range(600):  # the heartbeat moves the owner lease's mtime on
            await asyncio.sleep(0.05)
            if owner_lease.stat().st_mtime > beat:
                break
        assert owner_lease.stat().st_mtime > beat, "the heartbeat did not beat the owner lease"
        assert fleet.book.leases() == [lease]  # the sandbox's own lease is not rewritten
        assert find_orphans(fleet.book, owners={os.getpid()}) == []  # a live owner's lease is no orphan
    finally:
        await sb.close()
        fleet.close()
    assert fleet.book.leases() == []


@needs_docker
def test_an_expired_lease_of_another_host_is_reclaimed_a_live_one_is_not(tmp_path: Path) -> None:
    """Across hosts the pid means nothing: only expiry tells a dead owner, and the reaper acts on it."""
    import docker

    client = docker.from_env()
    container = client.containers.run(DOCKER_IMAGE, ["sleep", "infinity"], detach=True, network_mode="none")
    now = [1000.0]
    book = LeaseBook(tmp_path, ttl_s=30, clock=lambda: now[0])
    try:
        lease = book.grant("docker", str(container.id)).model_copy(update={"host": "another-host"})
        book.record(lease)
        mine = {os.getpid()}  # the shared engine may hold other runs' orphans: not this test's business
        assert find_orphans(book, providers=("docker",), owners=mine) == []  # not expired yet
        now[0] += 31
        (orphan,) = find_orphans(book, providers=("docker",), owners=mine)
        assert orphan.ref == container.id and "expired" in orphan.why
        assert reap([orphan], book) == {orphan: None}
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(container.id)
        assert book.leases() == []
    finally:
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
        client.close()


@needs_docker
async def test_a_fleet_reaps_orphans_in_the_background_when_it_starts(tmp_path: Path) -> None:
    """The next run cleans up after the last: its fleet's first open sweeps the lease directory."""
    import docker

    client = docker.from_env()
    container = client.containers.run(DOCKER_IMAGE, ["sleep", "infinity"], detach=True, network_mode="none")
    book = LeaseBook(tmp_path / "leases", ttl_s=30)
    lease = book.grant("docker", str(container.id)).model_copy(
        update={"host": "another-host", "expires_at": 0}
    )
    book._write(lease)
    fleet = Fleet(config(tmp_path, Provider(name="local"), Provider(name="docker")))
    try:
        async with await fleet.open(POLICY) as sb:
            assert sb.report().backend == "local"
            for _ in range(600):
                # sparse: no inspect per container, which a container of another run going meanwhile
                # turns into a 404 (seen with two suites at once on one engine)
                gone = not [c for c in client.containers.list(all=True, sparse=True) if c.id == container.id]
                # the reaper removes the container, then its lease: a loaded host can be seen between
                if gone and [x.provider for x in fleet.book.leases()] == ["local"]:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(
                    "the fleet did not reap the container of an expired lease and the lease with it: "
                    f"container gone {gone}, leases {[x.provider for x in fleet.book.leases()]}"
                )
    finally:
        fleet.close()
        with contextlib.suppress(docker.errors.NotFound):
            container.remove(force=True)
        client.close()


def test_an_expired_lease_of_a_live_owner_on_this_host_is_kept(tmp_path: Path) -> None:
    """A late heartbeat (a loaded host) must not cost a live owner its sandbox."""
    now = [0.0]
    book = LeaseBook(tmp_path, ttl_s=1, clock=lambda: now[0])
    book.grant("e2b", "sandbox-of-a-live-owner")
    now[0] += 100
    assert find_orphans(book, providers=("e2b",), owners={os.getpid()}) == []


# -- the reaper after kill -9 of the owner -------------------------------------------------------------

OWNER = """
    import asyncio, json, sys
    import envhub.sandbox as sandbox

    async def main():
        n = int(sys.argv[1])
        boxes = [await sandbox.open("fleet", policy=sandbox.IsolationPolicy(memory_mb=256)) for _ in range(n)]
        await boxes[0].exec("sleep 1000 & echo started")  # something running when the owner dies
        print(json.dumps([b.report().backend for b in boxes]), flush=True)
        await asyncio.sleep(1000)

    asyncio.run(main())
"""


def wait_orphaned_children(deadline_s: float = 30.0) -> None:
    """Wait for the owner's sandbox processes to end, collecting their exit status: they die with it
    (bwrap's --die-with-parent) and are handed to this process, a child subreaper once it made a local
    sandbox. Outside a test the reaper runs in another process, and init collects them."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        left = [pid for pid in descendants() if _slot_uid(pid)]
        if not left:
            return
        for pid in left:
            if _state(pid) == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)


def _slot_uid(pid: int) -> bool:
    try:
        config = settings()
        first, count = config.sandbox_uid_base, config.sandbox_max_slots
        return first <= Path(f"/proc/{pid}").stat().st_uid < first + count
    except FileNotFoundError:
        return False


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return ""


@pytest.fixture
def e2b_double(monkeypatch: pytest.MonkeyPatch) -> Iterator[E2BDouble]:
    """The local double of E2B's API, and the SDK (here and in child processes) pointed at it."""
    with serving(monkeypatch) as fake:
        yield fake


@pytest.fixture
def killed_owner(
    tmp_path: Path, e2b_double: E2BDouble, own_temp_dir: Path
) -> Iterator[tuple[int, list[str], Path]]:
    """A process that opened sandboxes through the fleet (local while its quota of 2 lasts, then one
    container when an engine is here, then E2B), then was killed with SIGKILL: its pid, its providers,
    its lease dir. Its scratch areas and owner lease are in `own_temp_dir`."""
    leases = tmp_path / "leases"
    providers: list[dict[str, Any]] = [{"name": "local", "max_concurrent": 2}]
    if _DOCKER_SKIP is None:
        providers.append({"name": "docker", "max_concurrent": 1})
    providers.append({"name": "e2b"})
    fleet_config = {"providers": providers, "lease_dir": str(leases), "lease_ttl_s": 10, "heartbeat_s": 1}
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent(OWNER))
    env = {
        **os.environ,
        "ENVHUB_FLEET": json.dumps(fleet_config),
        "PYTHONPATH": os.getcwd(),
        "TMPDIR": str(own_temp_dir),
    }
    proc = subprocess.Popen(
        [sys.executable, str(script), str(len(providers) + 1)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the owner process died before opening its sandboxes"
        opened = json.loads(line)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        wait_orphaned_children()
        yield proc.pid, opened, leases
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        # Whatever the test did not reap goes now, so a failure leaves nothing running.
        reap(find_orphans(LeaseBook(leases, 10), owners={proc.pid}), LeaseBook(leases, 10))
        wait_orphaned_children()


def test_the_reaper_reclaims_what_a_killed_owner_left(
    killed_owner: tuple[int, list[str], Path], e2b_double: E2BDouble
) -> None:
    pid, opened, leases = killed_owner
    book = LeaseBook(leases, 10)
    expected = ["local", "local", "docker", "e2b"] if _DOCKER_SKIP is None else ["local", "local", "e2b"]
    assert opened == expected
    held = book.leases()
    assert sorted(lease.provider for lease in held) == sorted(opened)
    assert all(lease.owner_pid == pid for lease in held)
    scratch = [Path(lease.ref) for lease in held if lease.provider == "local"]
    containers = [lease.ref for lease in held if lease.provider == "docker"]
    (remote,) = [lease.ref for lease in held if lease.provider == "e2b"]
    assert [s.sandbox_id for s in e2b_double.live()] == [remote]
    assert all(p.is_dir() for p in scratch)
    if containers:
        import docker

        with contextlib.closing(docker.from_env()) as client:
            labels = client.containers.get(containers[0]).labels
        assert labels["envhub.owner"] == str(pid) and labels["envhub.host"] == socket.gethostname()

    orphans = find_orphans(book, owners={pid})
    assert {(o.provider, o.ref) for o in orphans} >= {(lease.provider, lease.ref) for lease in held}
    assert all("dead" in o.why for o in orphans if o.lease_id)
    # Without the leases, the owner marks alone find the same sandboxes: scratch names, container
    # labels, E2B metadata (listed through the SDK against the double).
    by_marks = {(o.provider, o.ref) for o in find_orphans(None, owners={pid})}
    assert by_marks >= {(lease.provider, lease.ref) for lease in held}

    dry = CliRunner().invoke(
        app, ["fleet", "reap", "--dry-run", "--owner", str(pid), "--lease-dir", str(leases)]
    )
    assert dry.exit_code == 0 and dry.output.count("would remove") == len(orphans), dry.output
    assert all(p.is_dir() for p in scratch) and len(book.leases()) == len(held)  # a dry run removes nothing

    status = CliRunner().invoke(app, ["fleet", "status", "--lease-dir", str(leases)])
    assert status.exit_code == 0 and "orphans" in status.output

    done = CliRunner().invoke(app, ["fleet", "reap", "--owner", str(pid), "--lease-dir", str(leases)])
    assert done.exit_code == 0 and done.output.count("removed") >= len(held), done.output
    assert not any(p.exists() for p in scratch) and book.leases() == []
    mounts = Path("/proc/self/mounts").read_text()
    assert not any(str(p) in mounts for p in scratch), "a scratch tmpfs is still mounted"
    if containers:
        import docker

        client = docker.from_env()
        try:
            for cid in containers:
                with pytest.raises(docker.errors.NotFound):
                    client.containers.get(cid)
        finally:
            client.close()
    assert e2b_double.live() == [], "the E2B sandbox still runs (billed until it expires)"
    assert find_orphans(book, owners={pid}) == []
