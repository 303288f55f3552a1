"""The exec server in C (`exec_server.c`), built once per host where a C compiler is found.

Why: a sandbox's exec server starts with its first command (or before, in a spare), and the Python one
spends ~11 ms of CPU starting its interpreter, about a third of all a sandbox costs to make and close;
at concurrency, on a small host, that CPU is what limits how many sandboxes open per second. The C one
starts in well under a millisecond and speaks the same protocol (exec_client.py).

Why compiled here rather than shipped: a binary would make the wheel platform-specific for one small
file, and every host that runs bubblewrap sandboxes has a libc to build against. Where no compiler is
found, or the build fails, sandboxes start the Python server as before (`ENVHUB_SANDBOX_EXEC_SERVER`
chooses either outright). The build goes to a cache of this uid's own, never to a place others could
write: the server runs as every sandbox's pid 1.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import platform
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from envhub.settings import settings

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("exec_server.c")
INSIDE = "/.envhub/exec-server"
"""Where a sandbox sees the binary: bound read-only over a file of bwrap's root tmpfs."""
COMPILERS = ("cc", "gcc", "clang")
BUILD_TIMEOUT_S = 60.0
LINKS = (("-static-pie",), ("-fPIE", "-pie"))
"""How the binary is linked, in order of preference. Static first: every sandbox execs it twice (the
launcher, then the server as pid 1), and a static binary skips the dynamic loader, ~0.1 ms of CPU an
exec on the 2-vCPU host, ~1% of an open (docs/benchmarks.md). Position-independent either way, whatever
the compiler's default: the server parses every request of a sandbox as its pid 1, and keeps its
addresses randomized. Dynamic where no static libc is installed."""


def exec_server() -> Path | None:
    """The host path of the built C exec server; None where sandboxes use the Python one."""
    if settings().sandbox_exec_server == "python":
        return None
    return _built()


def missing() -> str | None:
    """Why no exec server may start, where the C one is asked for outright and could not be built."""
    if settings().sandbox_exec_server != "native" or _built() is not None:
        return None
    return (
        "ENVHUB_SANDBOX_EXEC_SERVER=native, but the C exec server could not be built (install a C "
        f"compiler: one of {', '.join(COMPILERS)}; the log says what failed), or unset it to fall back to "
        "the Python server"
    )


@functools.cache
def _built() -> Path | None:
    """The binary, built if the cache lacks it (once per host) and seen to run (once per process); None,
    logged, where it cannot be."""
    recipe = SOURCE.read_bytes() + platform.machine().encode() + repr(LINKS).encode()
    digest = hashlib.sha256(recipe).hexdigest()[:16]
    binary = _cache_root() / digest / "envhub-exec-server"
    try:
        if not _trusted(binary):
            compiler = find_compiler()
            if compiler is None:
                log.info("no C compiler on PATH: local sandboxes start the Python exec server")
                return None
            _build(compiler, binary)
        # A cache on a noexec mount, say, would otherwise fail every sandbox's start rather than this.
        subprocess.run(
            [str(binary), "launch", "-", "0", "0", "--", "/bin/true"],
            check=True,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        log.warning(
            "could not build or run the C exec server (%s%s): local sandboxes start the Python one",
            exc,
            f": {detail.decode(errors='replace').strip()[-500:]}" if detail else "",
        )
        return None
    return binary


def _build(compiler: str, binary: Path) -> None:
    folder = binary.parent
    folder.mkdir(parents=True, exist_ok=True)
    for level in (folder, folder.parent, folder.parent.parent):  # readable by slot uids whatever the umask
        if level.stat().st_uid == os.geteuid():
            level.chmod(0o755)
    if not _trusted(folder, directory=True):
        raise OSError(f"{folder} is not this uid's own, or others may write to it")
    with tempfile.TemporaryDirectory(dir=folder) as work:
        target = Path(work) / binary.name
        for link in LINKS[:-1]:
            try:
                _compile(compiler, link, target)
                break
            except subprocess.CalledProcessError:
                log.info(
                    "could not link the C exec server with %s (no static libc?): trying the next way", link
                )
        else:
            _compile(compiler, LINKS[-1], target)  # the last way: its failure is the build's
        target.chmod(0o755)
        os.replace(target, binary)  # whole or not at all, whoever else builds it at the same moment
    if not _trusted(binary):
        raise OSError(f"{binary} is not this uid's own, or others may write to it")


def find_compiler() -> str | None:
    """The first C compiler of COMPILERS on PATH."""
    return next((found for name in COMPILERS if (found := shutil.which(name))), None)


def _compile(compiler: str, link: tuple[str, ...], target: Path) -> None:
    subprocess.run(
        [compiler, "-O2", *link, "-o", str(target), str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT_S,
    )


def _cache_root() -> Path:
    """As root, a system cache every slot uid can read (bubblewrap binds the file as the slot's uid, so
    root's home would be out of its reach); otherwise this user's own cache."""
    if os.geteuid() == 0:
        return Path("/var/cache/envhub/exec-server")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envhub" / "exec-server"


def _trusted(path: Path, *, directory: bool = False) -> bool:
    """Ours and writable by nobody else, as is every folder above it up to the cache root: anyone who
    could replace the binary would run code as every sandbox's init."""
    top = _cache_root().parent
    with contextlib.suppress(OSError):
        for at in [path, *path.parents]:
            st = os.lstat(at)
            if at == path and (stat.S_ISDIR(st.st_mode) != directory or stat.S_ISLNK(st.st_mode)):
                return False
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (st.st_mode & stat.S_ISVTX):
                return False
            if st.st_uid not in (os.geteuid(), 0):
                return False
            if at == top:
                return True
        return True
    return False


def server_name() -> str:
    """The exec server's name in a sandbox's process list (pid 1's comm), as sandboxes start it now."""
    return Path(INSIDE).name if exec_server() is not None else "python3"
