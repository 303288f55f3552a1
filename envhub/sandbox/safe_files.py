"""File I/O into a sandbox's scratch that sandboxed code cannot redirect: every path is opened one
component at a time beneath the scratch root, with O_NOFOLLOW, so a planted symlink, FIFO or device is
refused rather than followed or waited on."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import time
from pathlib import Path

from envhub.sandbox.base import MAX_TREE_DEPTH, not_regular
from envhub.sandbox.results import SandboxTimeout

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir_beneath(root: Path, parts: list[str], *, make: bool, uid: int) -> int:
    """Open a directory below root one component at a time, never following a symlink.

    The sandbox controls what is in its scratch area; a symlink planted there must not lead the host
    (running as root) to read or write outside it, even if swapped while we walk.
    """
    fd = os.open(root, DIR_FLAGS)
    try:
        for part in parts:
            if part in ("", ".", ".."):
                raise PermissionError(f"bad path component {part!r}")
            try:
                nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    os.chown(part, uid, uid, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass  # a concurrent write made it first
                nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(_mode(part, fd)):
                    raise PermissionError(
                        f"{part} (in {'/'.join(parts)}) is a symlink; the host does not follow links the "
                        "sandbox made"
                    ) from exc
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_beneath(root: Path, parts: list[str], data: bytes, mode: int, uid: int) -> None:
    path = "/".join(parts)
    dfd = _open_dir_beneath(root, parts[:-1], make=True, uid=uid)
    try:
        # O_NONBLOCK: a named pipe planted by the sandbox fails at once (ENXIO) or is seen by fstat,
        # instead of blocking a host thread until someone opens its other end.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            fd = os.open(parts[-1], flags, mode, dir_fd=dfd)
        except OSError as exc:
            raise _refusal(exc, path, parts[-1], dfd) from exc
        found = os.fstat(fd).st_mode
        if not stat.S_ISREG(found):
            os.close(fd)
            raise not_regular(path, found)
        os.ftruncate(fd, 0)
        with os.fdopen(fd, "wb") as f:
            os.fchown(f.fileno(), uid, uid)
            os.fchmod(f.fileno(), mode)
            f.write(data)
    finally:
        os.close(dfd)


def read_beneath(root: Path, parts: list[str]) -> bytes:
    path = "/".join(parts)
    dfd = _open_dir_beneath(root, parts[:-1], make=False, uid=-1)
    try:
        try:
            # O_NONBLOCK: opening a named pipe planted by the sandbox must not block a host thread.
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
            fd = os.open(parts[-1], flags, dir_fd=dfd)
        except OSError as exc:
            raise _refusal(exc, path, parts[-1], dfd) from exc
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(f"{path} is a directory")
            if not stat.S_ISREG(mode):
                raise not_regular(path, mode)
            return f.read()
    finally:
        os.close(dfd)


def _mode(name: str, dir_fd: int) -> int:
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode


def _refusal(exc: OSError, path: str, name: str, dir_fd: int) -> OSError:
    """The error to raise for a failed open of `name`: symlinks and special files said plainly."""
    if exc.errno == errno.ELOOP:
        return PermissionError(f"{path} is a symlink; the host does not follow links the sandbox made")
    if exc.errno == errno.ENXIO:  # a pipe with no reader, or a socket
        with contextlib.suppress(OSError):
            return not_regular(path, _mode(name, dir_fd))
    return exc


def upload_beneath(local: Path, root: Path, parts: list[str], uid: int) -> None:
    if not local.is_dir():
        raise NotADirectoryError(str(local))
    for dirpath, _dirnames, filenames in os.walk(local):
        rel = Path(dirpath).relative_to(local).parts
        os.close(_open_dir_beneath(root, parts + list(rel), make=True, uid=uid))
        for name in filenames:
            src = Path(dirpath) / name
            if src.is_symlink():
                continue
            write_beneath(root, [*parts, *rel, name], src.read_bytes(), src.stat().st_mode & 0o777, uid)


_OPEN_ENTRY = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def download_beneath(root: Path, parts: list[str], dest: Path, deadline: float) -> None:
    path = "/".join(parts) or "."
    parent = _open_dir_beneath(root, parts[:-1], make=False, uid=-1) if parts else None
    try:
        if parent is None:
            fd = os.open(root, DIR_FLAGS)
        else:
            try:
                fd = os.open(parts[-1], _OPEN_ENTRY, dir_fd=parent)
            except OSError as exc:
                raise _refusal(exc, path, parts[-1], parent) from exc
    finally:
        if parent is not None:
            os.close(parent)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            with os.fdopen(os.dup(fd), "rb") as src, open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
            return
        if not stat.S_ISDIR(mode):
            raise not_regular(path, mode)
        dest.mkdir(parents=True, exist_ok=True)
        _copy_tree(os.dup(fd), os.open(dest, DIR_FLAGS), path, deadline)
    finally:
        os.close(fd)


def _copy_tree(src: int, dst: int, path: str, deadline: float) -> None:
    """Copy the directory open at src into the one open at dst (both fds are consumed).

    Iterative, with a descriptor pair per level (capped at MAX_TREE_DEPTH) and no path ever built:
    the sandbox decides how deep the tree is. Symlinks and special files are skipped.
    """
    stack = [(src, dst, iter(os.listdir(src)))]
    try:
        while stack:
            sfd, dfd, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                os.close(sfd)
                os.close(dfd)
                continue
            if time.monotonic() > deadline:
                raise SandboxTimeout(f"downloading {path} ran past the sandbox's wall time")
            try:
                child = os.open(name, _OPEN_ENTRY, dir_fd=sfd)
            except OSError:
                continue  # a symlink (ELOOP), or gone
            mode = os.fstat(child).st_mode
            if stat.S_ISREG(mode):
                _copy_file(child, name, dfd)
            elif stat.S_ISDIR(mode) and len(stack) <= MAX_TREE_DEPTH:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=dfd)
                stack.append((child, os.open(name, DIR_FLAGS, dir_fd=dfd), iter(os.listdir(child))))
            elif stat.S_ISDIR(mode):
                os.close(child)
                raise OSError(
                    errno.ENAMETOOLONG,
                    f"{path} is nested deeper than {MAX_TREE_DEPTH} directories; not copied further "
                    "(archive it inside the sandbox and download the archive)",
                )
            else:
                os.close(child)  # a named pipe, socket or device: never opened for reading
    finally:
        for sfd, dfd, _ in stack:
            os.close(sfd)
            os.close(dfd)


def _copy_file(src: int, name: str, dst_dir: int) -> None:
    """Copy the regular file open at src (consumed) to `name` in the directory open at dst_dir."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    out = os.open(name, flags, 0o644, dir_fd=dst_dir)
    with os.fdopen(src, "rb") as reader, os.fdopen(out, "wb") as writer:
        shutil.copyfileobj(reader, writer)
