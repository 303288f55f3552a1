"""One workspace runtime: a folder an agent edits through tools, then graded by tests, in a bubblewrap
sandbox on this machine (`local`) or in a container of a Docker image (`docker`).

SWE (`envs/swe`) and Harbor (`envhub.integrations.harbor`) both play their episodes this way, and what
they share is here: the two kinds and the check of a chosen one, the image lookup (no registry is
assumed: a missing image is named with how to load it), opening the sandbox of a kind, copying a host
folder in as Docker's COPY does, the host side of a local sandbox (the Python it sees, a host folder
opened to its uid), and the `Workspace` that holds the open sandbox and the host folder it owns until
it closes. What is each one's own stays with it: SWE's conda environments, specs and grader
guard; Harbor's task.toml, Dockerfile plan and reward files. The isolation policy (limits, timeouts,
output caps, binds) is the caller's: each knows what its tasks need.
"""

from __future__ import annotations

import asyncio
import io
import json
import secrets
import shutil
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import envhub.sandbox
from envhub.core import InfrastructureError
from envhub.sandbox.base import Sandbox
from envhub.sandbox.bwrap import DEFAULT_PATH
from envhub.sandbox.policy import IsolationPolicy
from envhub.sandbox.results import SandboxUnavailable

WorkspaceKind = Literal["docker", "local"]
WORKSPACE_KINDS: tuple[WorkspaceKind, ...] = ("docker", "local")


def checked_kind(kind: str) -> WorkspaceKind:
    """`kind` if it is a workspace kind; ValueError naming both otherwise."""
    for known in WORKSPACE_KINDS:
        if kind == known:
            return known
    raise ValueError(f"unknown runtime {kind!r}; choose one of {', '.join(WORKSPACE_KINDS)}")


def image_config(image: str) -> dict[str, Any] | None:
    """The image's config (its `WorkingDir`, `Env`, `User`) as the local engine holds it, or None when no
    engine answers or it lacks the image. Never pulls; the CLI, so no `docker` extra is needed to ask."""
    if shutil.which("docker") is None:
        return None
    try:
        done = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .Config}}", image],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    config = json.loads(done.stdout or "null")
    return config if isinstance(config, dict) else {}


def image_present(image: str) -> bool:
    """Whether a Docker engine answers and has `image` (no pull: no registry is assumed)."""
    return image_config(image) is not None


def require_image(image: str) -> dict[str, Any]:
    """`image_config`, or SandboxUnavailable saying how to load the image."""
    config = image_config(image)
    if config is None:
        raise SandboxUnavailable(
            f"image {image} is not loaded in the local Docker engine (or no engine answers) and no registry "
            f"is assumed: `docker pull {image}` where a registry is reachable, or `docker load` it"
        )
    return config


async def open_sandbox(kind: str, policy: IsolationPolicy, *, image: str | None = None) -> Sandbox:
    """A fresh sandbox of `kind` (docker's runs `image`); SandboxUnavailable says what is missing."""
    if checked_kind(kind) == "docker":
        if image is None:
            raise ValueError("a docker workspace needs an image")
        return await envhub.sandbox.open("docker", policy=policy, image=image)
    return await envhub.sandbox.open("local", policy=policy)


def sandbox_python(version: str | None = None) -> tuple[Path, str]:
    """The Python a local sandbox runs, from the host's /usr (the first `python{version}` on the
    sandbox's PATH when `version` is asked and there, else its first python3), and its X.Y."""
    names = (f"python{version}", "python3") if version else ("python3",)
    found = next((path for name in names if (path := shutil.which(name, path=DEFAULT_PATH))), None)
    if found is None:
        raise SandboxUnavailable(
            f"the local runtime needs a python3 on the sandbox's PATH ({DEFAULT_PATH}): "
            "apt-get install python3"
        )
    out = subprocess.run(
        [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return Path(found), out.stdout.strip()


def open_to_sandbox(root: Path) -> None:
    """Make a host folder readable, not writable, by the local sandbox's unprivileged uid, which reads
    it through a read-only bind: `chmod -R a+rX,go-w` without setuid bits; links are left alone."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode & 0o777
        execute = 0o111 if path.is_dir() or mode & 0o111 else 0
        path.chmod((mode | 0o444 | execute) & ~0o022)


def _packed(path: Path) -> tuple[bool, bytes, int]:
    """Whether `path` is a folder, and its contents as a tar archive, or the file's bytes and mode."""
    if not path.is_dir():
        return False, path.read_bytes(), path.stat().st_mode & 0o777
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(path, arcname=".")
    return True, buffer.getvalue(), 0o755


_UNPACK = 'mkdir -p -- "$2" && tar -xf "$1" -C "$2" --no-same-owner; status=$?; rm -f -- "$1"; exit $status'


async def copy_in(sandbox: Sandbox, path: Path, dest: str) -> None:
    """COPY as Docker does it: a folder's contents into `dest` (made if absent), a file to `dest`.

    A folder goes as one archive unpacked inside the sandbox: one round trip whatever the number of
    files (a repository with its .git), and `dest` may be the sandbox's working directory, which
    `upload_dir` may not replace. Modes are kept; the sandbox's user owns what lands.
    """
    is_dir, data, mode = await asyncio.to_thread(_packed, path)
    if not is_dir:
        await sandbox.write_file(dest, data, mode=mode)
        return
    archive = f"/tmp/envhub-copy-{secrets.token_hex(8)}.tar"
    await sandbox.write_file(archive, data)
    result = await sandbox.exec(["/bin/sh", "-c", _UNPACK, "sh", archive, dest], timeout=120)
    if not result.ok:
        raise InfrastructureError(f"unpacking {path.name} into {dest} failed: {result.stderr.strip()[-500:]}")


@dataclass
class Workspace:
    """An open sandbox for one episode, where the agent works, and the host folder it owns."""

    sandbox: Sandbox
    kind: WorkspaceKind
    workdir: str
    host_dir: Path | None = None
    """A host folder made for this workspace (bound into a local sandbox), removed when it closes."""
    notes: dict[str, str] = field(default_factory=dict)
    """What the episode's info should say about where it ran (the image, the interpreter)."""

    async def close(self) -> None:
        """Close the sandbox, then remove the host folder, whichever fails."""
        try:
            await self.sandbox.close()
        finally:
            if self.host_dir is not None:
                await asyncio.to_thread(shutil.rmtree, self.host_dir, True)
