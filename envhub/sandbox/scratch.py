"""The local backend's scratch area: filled for a fresh sandbox, swept when a crashed run left one,
and removed even when the code inside made it hostile (unreadable directories, deep trees)."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from envhub.sandbox import owner
from envhub.sandbox.libc import mount_tmpfs, umount
from envhub.sandbox.policy import IsolationPolicy, MiB
from envhub.sandbox.results import SandboxError, SandboxTimeout
from envhub.sandbox.safe_files import DIR_FLAGS

CLEANUP_TIMEOUT_S = 60.0
"""The bound on emptying a writable area that is a plain directory (no tmpfs to swap: not root)."""


STAGING = "launch-root"
"""As root, the scratch area's empty root-owned folder where the launcher stages the trimmed mount
namespace it hands bubblewrap (exec_server.c, trim_mounts); never bound into the sandbox."""


def fill_scratch(scratch: Path, policy: IsolationPolicy, uid: int) -> None:
    """Make the (empty) scratch directory a sandbox's writable area: a capped tmpfs (as root) and the
    workdir, /tmp and /dev/shm directories in it, owned by the slot's uid."""
    if os.geteuid() == 0:
        mount_tmpfs(
            str(scratch),
            f"size={policy.disk_mb * MiB},nr_inodes={policy.max_files},mode=0700,uid={uid},gid={uid}",
        )
        os.mkdir(f"{scratch}/{STAGING}", 0o700)
    for area in ("work", "tmp", "shm"):  # string paths: this runs once an open
        os.mkdir(f"{scratch}/{area}", 0o700)
        os.chown(f"{scratch}/{area}", uid, uid)


SCRATCH_PREFIX = "envhub-sandbox-"
_swept = False


def scratch_prefix() -> str:
    """The name a new scratch area starts with: `envhub-sandbox-<pid>-<owner key>-`. The key names this
    process's owner lease (envhub.sandbox.owner), written and beating from now on: what tells a reaper
    in any PID namespace that shares this temp dir that the area's owner lives."""
    return f"{SCRATCH_PREFIX}{os.getpid()}-{owner.me().key}-"


def scratch_owner(path: Path) -> tuple[str, str | None]:
    """The pid and owner key a scratch area's name carries (no key: made by an envhub before leases)."""
    parts = path.name.removeprefix(SCRATCH_PREFIX).split("-")
    key = parts[1] if len(parts) == 3 and len(parts[1]) == 32 and parts[1].isalnum() else None
    return parts[0], key


def why_stale(path: Path, now: float | None = None) -> str | None:
    """Why a scratch area's owner is dead (owner.judge; with no lease in sight, owner.judge_without_lease
    on the area's age), or None while it may live: what the sweep and the fleet's reaper both ask."""
    pid, key = scratch_owner(path)
    verdict = owner.judge(key, now=now)
    if verdict.unknown:
        try:
            made_at = os.lstat(path).st_mtime
        except OSError:
            return None
        verdict = owner.judge_without_lease(pid, None, made_at, now)
    return verdict.why if verdict.dead else None


def stale_scratch_areas() -> Iterator[tuple[Path, str]]:
    """Each scratch area in the temp dir whose owner is dead, with why: what the sweep removes and the
    fleet's reaper lists."""
    for path in sorted(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*")):
        if (why := why_stale(path)) is not None:
            yield path, why


def sweep_stale_scratch() -> None:
    """Remove scratch areas whose owner is dead by the owner rule (envhub.sandbox.owner.judge): it was
    SIGKILLed before it could clean up. Runs once per process, before its first sandbox. An area of a
    live owner in another PID namespace sharing this temp dir is kept: its owner lease is fresh."""
    global _swept
    if _swept:
        return
    _swept = True
    for path, _ in stale_scratch_areas():
        with contextlib.suppress(OSError, SandboxError):  # best effort: the next process tries again
            remove_scratch(path)
    with contextlib.suppress(OSError):
        owner.sweep_stale_leases(in_use=names_owner)


def names_owner(key: str) -> bool:
    """Whether a scratch area in the temp dir still names owner `key` (its lease must stay: see
    envhub.sandbox.owner.sweep_stale_leases)."""
    return any(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-{key}-*"))


def remove_scratch(scratch: Path) -> None:
    """Remove a scratch area: as root its tmpfs goes with the unmount, leaving an empty mount point."""
    if os.geteuid() == 0:
        umount(str(scratch))
    remove_tree(scratch, deadline=time.monotonic() + CLEANUP_TIMEOUT_S)


def remove_tree(path: Path, *, deadline: float) -> None:
    """Delete a directory tree of any depth, never following a symlink, by `deadline` (monotonic).

    `shutil.rmtree` recurses (RecursionError past ~1000 levels) and holds a descriptor per level; a
    sandbox can nest directories far deeper. Here a non-empty subdirectory is emptied by moving its
    entries up one level, so the walk holds two descriptors, builds no path and needs no recursion.
    Directories the sandbox made unreadable (mode 000, same uid when not root) are made readable.
    """
    try:
        top = _open_dir_forcibly(str(path), None)
    except FileNotFoundError:
        return
    try:
        serial = itertools.count()
        while names := os.listdir(top):
            for name in names:
                if time.monotonic() > deadline:
                    raise SandboxTimeout(f"removing {path} took longer than {CLEANUP_TIMEOUT_S:g} s")
                _remove_entry(top, name, serial)
    finally:
        os.close(top)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(path)


def _remove_entry(fd: int, name: str, serial: Iterator[int]) -> None:
    """Remove one entry of the directory at fd; a non-empty directory is emptied into fd instead."""
    try:
        os.unlink(name, dir_fd=fd)
        return
    except FileNotFoundError:
        return
    except IsADirectoryError:
        pass
    try:
        os.rmdir(name, dir_fd=fd)
        return
    except OSError as exc:
        if exc.errno != errno.ENOTEMPTY:
            raise
    child = _open_dir_forcibly(name, fd)
    try:
        for entry in os.listdir(child):
            while True:  # a fresh name in fd; a taken one is retried (or replaced: it is going anyway)
                try:
                    os.rename(entry, f".envhub-rm-{next(serial)}", src_dir_fd=child, dst_dir_fd=fd)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR):
                        raise
    finally:
        os.close(child)
    os.rmdir(name, dir_fd=fd)


def _open_dir_forcibly(name: str, dir_fd: int | None) -> int:
    """Open a directory (never through a symlink), first giving ourselves rwx on it if we lack it.

    Only needed when not root: the sandbox then runs as our own uid and can chmod its directories.
    """
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        pinned = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.chmod(f"/proc/self/fd/{pinned}", 0o700)  # the pinned inode, not whatever is at name now
        finally:
            os.close(pinned)
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    if os.geteuid() != 0 and os.fstat(fd).st_mode & 0o700 != 0o700:
        os.fchmod(fd, 0o700)  # to unlink and rename entries in it
    return fd
