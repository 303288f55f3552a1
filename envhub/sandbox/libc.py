"""The few libc calls the local backend makes through ctypes: becoming a subreaper of orphaned sandbox
inits (and reaping them), mounting and unmounting the scratch tmpfs."""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import errno
import os

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2
PR_SET_CHILD_SUBREAPER = 36
_subreaper = False


def become_subreaper() -> None:
    """Adopt bwrap's orphaned pid-1 processes so they can be reaped.

    The outer bwrap exits as soon as its sandbox reports an exit status, without waiting for the
    sandbox's init; that init is then reparented to the nearest subreaper, else to the host's pid 1.
    On machines whose pid 1 never reaps (containers, minimal VMs), those zombies would pile up against
    the slot uid's RLIMIT_NPROC until back-to-back sandboxes fail with EAGAIN. As a subreaper we reap
    exactly those pids (bwrap reports them), never anyone else's children.
    """
    global _subreaper
    if not _subreaper:
        if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
        _subreaper = True


async def reap(pid: int) -> None:
    """Reap one adopted sandbox init (see `become_subreaper`) once it has died."""
    for _ in range(1000):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks
        except ChildProcessError:
            return  # already reaped, or never adopted
        if done:
            return
        await asyncio.sleep(0.005)


def mount_tmpfs(target: str, options: str) -> None:
    # No maintained library wraps mount(2); two syscalls do not justify running `mount`.
    if _libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mounting the sandbox scratch tmpfs on {target}: {os.strerror(err)}")


def umount(target: str) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # not mounted: nothing to do
            raise OSError(err, f"unmounting {target}: {os.strerror(err)}")
