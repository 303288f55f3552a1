"""Fixtures for the sandbox tests: the backends available here, and a leak check around every test."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy, Sandbox
from tests.envhub_testkit.leaks import sandbox_footprint

DOCKER_IMAGE = os.environ.get("ENVHUB_SANDBOX_IMAGE", "envhub/python:3-bookworm")


def docker_skip_reason() -> str | None:
    """Why the docker tests cannot run here, or None when they can."""
    try:
        import docker
    except ImportError:
        return "the docker SDK is not installed (pip install 'envhub-core[docker]')"
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


@pytest.fixture
def own_temp_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temp dir for this test alone, as `tempfile` sees it here (pass it on as TMPDIR to a child).

    For a test that kills an envhub process and then looks at the scratch areas it left: on a shared
    host any envhub process sweeps a dead owner's areas from the common temp dir before its first
    sandbox (`scratch.sweep_stale_scratch`), rightly, and once took them before the test looked."""
    private = Path(tempfile.mkdtemp(prefix="envhub-own-"))  # short: under the real temp dir
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    yield private
    shutil.rmtree(private, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every sandbox test must leave the host as it found it."""
    before = sandbox_footprint()
    yield
    after = sandbox_footprint()
    assert after == before, f"sandbox leftovers: before={before} after={after}"
