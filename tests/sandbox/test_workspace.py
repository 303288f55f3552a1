"""The workspace runtime SWE and Harbor share: kinds, images, opening, COPY-like upload, host folders."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envhub.sandbox import IsolationPolicy, SandboxUnavailable
from envhub.sandbox.workspace import (
    Workspace,
    checked_kind,
    copy_in,
    image_present,
    open_sandbox,
    open_to_sandbox,
    require_image,
    sandbox_python,
)
from tests.sandbox.conftest import BACKENDS, DOCKER_IMAGE

POLICY = IsolationPolicy(memory_mb=256, pids=64, disk_mb=64, wall_time_s=60, workdir="/work")


def test_an_unknown_kind_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match="'podman'; choose one of docker, local"):
        checked_kind("podman")
    assert checked_kind("local") == "local"


def test_a_missing_image_is_named_with_how_to_load_it() -> None:
    missing = "envhub/no-such-image:never"
    assert not image_present(missing)
    with pytest.raises(SandboxUnavailable, match="docker load"):
        require_image(missing)


async def test_a_docker_workspace_needs_an_image() -> None:
    with pytest.raises(ValueError, match="needs an image"):
        await open_sandbox("docker", POLICY)


def _tree(root: Path) -> Path:
    source = root / "repo"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("VALUE = 1\n")
    (source / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (source / "run.sh").chmod(0o755)
    (source / "notes.txt").write_text("plain\n")
    (source / "notes.txt").chmod(0o600)
    return source


@pytest.mark.parametrize("kind", BACKENDS)
async def test_copy_in_puts_a_folder_s_contents_into_the_working_directory_with_their_modes(
    kind: str, tmp_path: Path
) -> None:
    source = _tree(tmp_path)
    image = DOCKER_IMAGE if kind == "docker" else None
    sandbox = await open_sandbox(kind, POLICY, image=image)
    async with sandbox:
        await copy_in(sandbox, source, "/work")
        await copy_in(sandbox, source / "run.sh", "/work/bin-run.sh")
        listed = await sandbox.exec("cat pkg/mod.py && stat -c %a run.sh bin-run.sh notes.txt")
        leftovers = await sandbox.exec("ls /tmp")
    assert listed.ok, listed.stderr
    assert listed.stdout.split() == ["VALUE", "=", "1", "755", "755", "600"]
    assert "envhub-copy" not in leftovers.stdout


@pytest.fixture
def closed_folder() -> Iterator[Path]:
    """A host folder under /tmp (which the sandbox's uid reaches) whose entries are closed to others."""
    folder = Path(tempfile.mkdtemp(prefix="envhub-workspace-test-"))
    (folder / "inner").mkdir(mode=0o700)
    (folder / "inner" / "data.txt").write_text("read\n")
    (folder / "inner" / "data.txt").chmod(0o600)
    (folder / "inner" / "tool").write_text("#!/bin/sh\necho tool\n")
    (folder / "inner" / "tool").chmod(0o700)
    (folder / "link").symlink_to("/etc/hostname")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


async def test_a_closed_host_folder_opened_to_the_sandbox_is_readable_there(closed_folder: Path) -> None:
    open_to_sandbox(closed_folder)
    modes = {
        name: os.stat(closed_folder / name).st_mode & 0o777 for name in ("", "inner/data.txt", "inner/tool")
    }
    assert modes == {"": 0o755, "inner/data.txt": 0o644, "inner/tool": 0o755}
    policy = POLICY.model_copy(update={"ro_binds": {str(closed_folder): "/opt/bound"}})
    workspace = Workspace(await open_sandbox("local", policy), "local", "/work", host_dir=closed_folder)
    result = await workspace.sandbox.exec("cat /opt/bound/inner/data.txt && /opt/bound/inner/tool")
    await workspace.close()
    assert result.ok and result.stdout.split() == ["read", "tool"], result.stderr
    assert not await asyncio.to_thread(closed_folder.exists), "closing the workspace removes its host folder"


def test_the_sandbox_python_prefers_the_asked_version_and_says_its_own() -> None:
    path, version = sandbox_python()
    assert path.name.startswith("python3") and version.startswith("3.")
    asked, asked_version = sandbox_python(version)
    assert asked_version == version and asked.name == f"python{version}"
    fallback, _ = sandbox_python("2.1")
    assert fallback.name == "python3"
