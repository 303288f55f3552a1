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
from envhub.sandbox.local import SCRATCH_PREFIX
from envhub.sandbox.slots import CGROUP_NAME, CGROUP_ROOT, MAX_SLOTS, UID_BASE

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


def _descendants() -> set[int]:
    """This process's descendants. Whatever its sandboxes leave running stays below it: it is the child
    subreaper of their orphans (see `envhub.sandbox.local._become_subreaper`)."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            ppid = int(Path(stat).read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone while we looked
        children.setdefault(ppid, []).append(int(Path(stat).parent.name))
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def sandbox_footprint() -> dict[str, object]:
    """What this process's sandboxes may leave behind: scratch dirs, mounts, processes of slot uids or in
    slot cgroups.

    Only this process's own: other envhub users on the same host (another test run, a rollout job) have
    sandboxes, slots and scratch areas of their own, which come and go while a test runs. Scratch dirs
    are named after their owner's pid, and leftover processes stay below their owner.
    """
    mine = f"{SCRATCH_PREFIX}{os.getpid()}-"
    scratch = sorted(glob.glob(os.path.join(tempfile.gettempdir(), f"{mine}*")))
    descendants = _descendants()
    slot_procs = []
    for pid in sorted(descendants):
        try:
            uid = Path(f"/proc/{pid}").stat().st_uid
        except FileNotFoundError:
            continue
        if UID_BASE <= uid < UID_BASE + MAX_SLOTS:
            slot_procs.append(pid)
    in_cgroups = []
    for procs in glob.glob(str(CGROUP_ROOT / "pids" / CGROUP_NAME / "slot*" / "cgroup.procs")):
        in_cgroups += [pid for pid in Path(procs).read_text().split() if int(pid) in descendants]
    mounts = [line for line in Path("/proc/self/mounts").read_text().splitlines() if mine in line]
    return {"scratch": scratch, "slot_procs": slot_procs, "cgroup_procs": in_cgroups, "mounts": mounts}


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every sandbox test must leave the host as it found it."""
    before = sandbox_footprint()
    yield
    after = sandbox_footprint()
    assert after == before, f"sandbox leftovers: before={before} after={after}"
