"""`Sandbox.fork` through the real backends: a child holds a copy of its parent's files, and what a parent
or any child does to its files afterwards no other of them ever sees."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy, Sandbox
from tests.envhub_testkit.leaks import sandbox_footprint
from tests.sandbox.conftest import BACKENDS, docker_skip_reason, open_backend

POLICY = IsolationPolicy(memory_mb=256, pids=64, disk_mb=64, wall_time_s=20)
SWE_IMAGE = "envhub/swe-mini:bookworm"


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """A fork is a sandbox like any other: closing it leaves nothing behind."""
    before = sandbox_footprint()
    yield
    assert sandbox_footprint() == before


async def _text(box: Sandbox, path: str) -> str:
    return (await box.read_file(path)).decode()


async def _exists(box: Sandbox, path: str) -> bool:
    return (await box.exec(["test", "-e", path])).exit_code == 0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_children_hold_the_parents_files_and_diverge_independently(backend: str) -> None:
    parent = await open_backend(backend, POLICY)
    children: list[Sandbox] = []
    try:
        setup = "mkdir -p src && echo base > src/a.txt && echo scratch > /tmp/t && echo shm > /dev/shm/s"
        assert (await parent.exec(setup)).exit_code == 0
        await parent.write_file("big.bin", bytes(range(256)) * 4096, mode=0o600)
        children = [await parent.fork(), await parent.fork()]
        for child in children:
            assert child is not parent and child.policy == parent.policy
            assert await _text(child, "src/a.txt") == "base\n"
            assert await _text(child, "/tmp/t") == "scratch\n"
            assert await _text(child, "/dev/shm/s") == "shm\n"
            assert await child.read_file("big.bin") == bytes(range(256)) * 4096
            assert (await child.exec("stat -c %a big.bin")).stdout.strip() == "600"

        first, second = children
        await first.write_file("src/a.txt", "first\n")
        await first.write_file("src/new.txt", "only in the first child\n")
        assert (await second.exec("rm src/a.txt /tmp/t")).exit_code == 0
        await parent.write_file("src/a.txt", "parent moved on\n")

        assert await _text(parent, "src/a.txt") == "parent moved on\n"
        assert await _text(parent, "/tmp/t") == "scratch\n"
        assert not await _exists(parent, "src/new.txt")
        assert await _text(first, "src/a.txt") == "first\n"
        assert await _text(first, "/tmp/t") == "scratch\n"
        assert not await _exists(second, "src/a.txt")
        assert not await _exists(second, "src/new.txt")
        assert not await _exists(second, "/tmp/t")
    finally:
        for box in (*children, parent):
            await box.close()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_planted_symlink_is_copied_as_a_link_never_followed(backend: str) -> None:
    """The copy is made on the host: a link to the host's files must arrive as a link, not their bytes."""
    parent = await open_backend(backend, POLICY)
    try:
        assert (await parent.exec("ln -s /etc/shadow leak && ln -s / root")).exit_code == 0
        async with await parent.fork() as child:
            assert (await child.exec("readlink leak")).stdout.strip() == "/etc/shadow"
            with pytest.raises(PermissionError):
                await child.read_file("leak")  # the host refuses links, as in the parent
            assert (await child.exec("test -L root")).exit_code == 0
    finally:
        await parent.close()


async def test_a_fork_of_a_closed_sandbox_is_refused() -> None:
    parent = await open_backend("local", POLICY)
    await parent.close()
    with pytest.raises(sandbox.SandboxError, match="closed"):
        await parent.fork()


@pytest.mark.skipif(docker_skip_reason() is not None, reason=str(docker_skip_reason()))
async def test_docker_writable_image_forks_through_a_commit_removed_with_the_child() -> None:
    """A writable_image container's own filesystem (SWE's /testbed) is carried by `docker commit`."""
    import docker

    client = docker.from_env()
    try:
        client.images.get(SWE_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{SWE_IMAGE} is not built (sandboxes/swe-mini)")
    policy = POLICY.model_copy(update={"writable_image": True, "workdir": "/testbed"})
    parent = await sandbox.open("docker", policy=policy, image=SWE_IMAGE)
    try:
        assert (await parent.exec("echo edited > note.txt && echo t > /tmp/t")).exit_code == 0
        child = await parent.fork()
        committed = child._fork_image  # type: ignore[attr-defined]
        assert committed is not None and client.images.list(name=committed)
        assert child.report().details["exec_user"] == parent.report().details["exec_user"]
        assert await _text(child, "note.txt") == "edited\n"
        assert await _text(child, "/tmp/t") == "t\n"
        await child.write_file("note.txt", "child\n")
        assert await _text(parent, "note.txt") == "edited\n"
        await child.close()
        assert not client.images.list(name=committed)
    finally:
        await parent.close()
        client.close()
