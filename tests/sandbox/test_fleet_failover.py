"""Failover when Docker's engine stops mid-batch: the rest of the batch runs on the next provider, and
no episode is lost or run twice. The engine is a private dockerd started for this test (its own socket,
data and exec roots, no bridge, no iptables); the machine's own engine, which others use, is untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envhub.sandbox import IsolationPolicy, SandboxError
from envhub.sandbox.fleet import Fleet, FleetConfig, Provider
from tests.sandbox.conftest import _DOCKER_SKIP, DOCKER_IMAGE
from tests.sandbox.e2b_double import bwrap_missing

START_TIMEOUT_S = 60


def private_engine_missing() -> str | None:
    """Why a private dockerd cannot run here, or None."""
    if bwrap_missing() is not None:
        return bwrap_missing()
    if _DOCKER_SKIP is not None:  # the image is copied from the machine's engine
        return _DOCKER_SKIP
    if os.geteuid() != 0:
        return "a private dockerd needs root (it mounts its own data root and runs containerd)"
    missing = [tool for tool in ("dockerd", "containerd", "docker") if shutil.which(tool) is None]
    return f"{', '.join(missing)} not installed; run sandboxes/ci-setup.sh" if missing else None


pytestmark = [
    pytest.mark.skipif(private_engine_missing() is not None, reason=private_engine_missing() or ""),
    pytest.mark.timeout(240),
]


@dataclass
class Engine:
    host: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        """Stop the engine as an operator or a crash would: running containers are killed with it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)


@pytest.fixture
def private_engine() -> Iterator[Engine]:
    """A dockerd of this test's own, holding a copy of the sandbox image."""
    root = Path(tempfile.mkdtemp(prefix="envhub-fleet-dockerd-", dir="/tmp"))  # a unix socket path is short
    host = f"unix://{root}/docker.sock"
    log = root / "dockerd.log"
    argv = [
        "dockerd",
        f"--host={host}",
        f"--data-root={root}/data",
        f"--exec-root={root}/exec",
        f"--pidfile={root}/docker.pid",
        "--bridge=none",
        "--iptables=false",
        "--ip-forward=false",
        "--shutdown-timeout=2",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    engine = Engine(host, process, log)
    try:
        ping = ["docker", "-H", host, "version", "--format", "{{.Server.Version}}"]
        for _ in range(START_TIMEOUT_S * 4):
            if process.poll() is not None:
                pytest.skip(f"a private dockerd would not start here: {log.read_text()[-600:]}")
            if subprocess.run(ping, capture_output=True).returncode == 0:
                break
            subprocess.run(["sleep", "0.25"], check=True)
        else:
            pytest.skip(f"a private dockerd did not answer in {START_TIMEOUT_S} s: {log.read_text()[-600:]}")
        copy = f"docker save {DOCKER_IMAGE} | docker -H {host} load"
        subprocess.run(["sh", "-c", copy], check=True, capture_output=True, timeout=180)
        yield engine
    finally:
        engine.stop()
        for line in reversed(Path("/proc/self/mounts").read_text().splitlines()):
            mount_point = line.split()[1]
            if mount_point.startswith(str(root)):
                subprocess.run(["umount", "-l", mount_point], check=False)
        shutil.rmtree(root, ignore_errors=True)


async def test_docker_stopped_mid_batch_fails_over_to_local_with_no_episode_lost_or_repeated(
    private_engine: Engine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", private_engine.host)  # the docker backend's client reads it
    fleet = Fleet(
        FleetConfig(
            providers=(Provider(name="docker", max_concurrent=2, retry_after_s=600), Provider(name="local")),
            lease_dir=tmp_path,
        )
    )
    policy = IsolationPolicy(memory_mb=256, pids=64, wall_time_s=30)
    episodes, before_stop = 10, 3
    results: dict[int, tuple[str, str, int]] = {}
    opened_after_stop: dict[int, str] = {}
    done_before_stop = asyncio.Event()
    stopped = asyncio.Event()
    slots = asyncio.Semaphore(2)

    async def episode(i: int) -> None:
        """One episode as the runner plays it: an infrastructure error is retried on a fresh sandbox.
        The batch's tail is queued behind the stop (the two before it run while the engine goes down), so
        that the test does not depend on which finishes first: the stop or a fast batch."""
        if i >= before_stop + 2:
            await stopped.wait()
        async with slots:
            for attempt in range(1, 4):
                try:
                    sb = await fleet.open(policy)
                except SandboxError:
                    continue
                provider = sb.report().backend
                if stopped.is_set():
                    opened_after_stop[i] = provider
                try:
                    out = (await sb.exec(["sh", "-c", f"echo {i}"])).stdout
                except SandboxError:
                    continue  # the engine went away under this episode: it runs again
                finally:
                    with contextlib.suppress(Exception):  # a dead engine cannot remove its container
                        await sb.close()
                assert i not in results, f"episode {i} completed twice"
                results[i] = (provider, out, attempt)
                if len(results) == before_stop:
                    done_before_stop.set()
                return

    async def stop_engine() -> None:
        await done_before_stop.wait()
        await asyncio.to_thread(private_engine.stop)
        stopped.set()

    stopper = asyncio.create_task(stop_engine())
    await asyncio.gather(*(episode(i) for i in range(episodes)))
    await asyncio.wait_for(stopper, 120)
    fleet.close()

    assert sorted(results) == list(range(episodes)), "an episode was lost"
    assert all(out == f"{i}\n" for i, (_, out, _) in results.items())
    providers = [p for p, _, _ in results.values()]
    assert providers.count("docker") >= before_stop
    assert opened_after_stop and set(opened_after_stop.values()) == {"local"}, opened_after_stop
    assert "local" in providers and any(f.startswith("docker:") for f in fleet.failures), fleet.failures
    assert len(fleet.failures) <= 2, "a dead engine is passed over for retry_after_s, not tried per episode"
    assert all(q.in_use == 0 for q in fleet.quotas.values()) and fleet.book.leases() == []
