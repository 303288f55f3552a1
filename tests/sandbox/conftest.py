"""Fixtures for the sandbox tests: the backends available here, and a leak check around every test."""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy, Sandbox
from envhub.sandbox.slots import CGROUP_NAME, CGROUP_ROOT, UID_BASE

DOCKER_IMAGE = os.environ.get("ENVHUB_SANDBOX_IMAGE", "envhub/python:3-bookworm")


def docker_skip_reason() -> str | None:
    """Why the docker tests cannot run here, or None when they can."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'envhub[docker]')"
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as exc:
        return f"no Docker engine is reachable ({type(exc).__name__}); run sandboxes/ci-setup.sh"
    try:
        client.images.get(DOCKER_IMAGE)
    except Exception:
        return f"image {DOCKER_IMAGE} is missing; build it with sandboxes/python/build.sh"
    finally:
        client.close()
    return None


_DOCKER_SKIP = docker_skip_reason()
BACKENDS = [
    pytest.param("local", id="local"),
    pytest.param(
        "docker",
        id="docker",
        marks=pytest.mark.skipif(_DOCKER_SKIP is not None, reason=_DOCKER_SKIP or ""),
    ),
]


async def open_backend(backend: str, policy: IsolationPolicy | None = None) -> Sandbox:
    image = DOCKER_IMAGE if backend == "docker" else None
    return await sandbox.open(backend, policy=policy or IsolationPolicy(), image=image)  # type: ignore[arg-type]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def sb(backend: str) -> AsyncIterator[Sandbox]:
    box = await open_backend(backend, IsolationPolicy(memory_mb=256, pids=64, disk_mb=64, wall_time_s=20))
    try:
        yield box
    finally:
        await box.close()


def sandbox_footprint() -> dict[str, object]:
    """What a sandbox may leave behind: scratch dirs, processes of slot uids, processes in slot cgroups."""
    scratch = sorted(glob.glob(os.path.join(tempfile.gettempdir(), "envhub-sandbox-*")))
    slot_procs: list[int] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            uid = proc.stat().st_uid
        except FileNotFoundError:
            continue
        if UID_BASE <= uid < UID_BASE + 256:
            slot_procs.append(int(proc.name))
    in_cgroups = []
    for procs in glob.glob(str(CGROUP_ROOT / "pids" / CGROUP_NAME / "slot*" / "cgroup.procs")):
        in_cgroups += Path(procs).read_text().split()
    mounts = [
        line for line in Path("/proc/self/mounts").read_text().splitlines() if "envhub-sandbox-" in line
    ]
    return {"scratch": scratch, "slot_procs": slot_procs, "cgroup_procs": in_cgroups, "mounts": mounts}


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every sandbox test must leave the host as it found it."""
    before = sandbox_footprint()
    yield
    after = sandbox_footprint()
    assert after == before, f"sandbox leftovers: before={before} after={after}"
