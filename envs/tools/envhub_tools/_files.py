"""The file tools' one operation, run *inside* the sandbox: `python3 -I -S -c <this file> OP ROOT REL SHOWN`.

Each tool call is one command, so the check and the access are one act: the path is walked from the
workspace one component at a time with O_NOFOLLOW, so a symlink anywhere in it (the last component or
a directory on the way) is refused, and an agent process swapping a link in while the call runs cannot
redirect it. Named pipes and other special files are refused before anything reads or writes them.
Standard library only. Errors go to stderr as one JSON line, `{"error": <exception name>, "message":
...}`, with exit status 2; the host turns them back into that exception.

OP is `read` (stdout: the file's first MAX bytes; argv[5] is MAX), `write` (stdin: the content) or
`list` (stdout: a JSON list of [name, is_directory]).
"""

import contextlib
import errno
import json
import os
import stat
import sys

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
KINDS = {
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}


class Refused(Exception):
    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error


def _link_or(name: str, dir_fd: int, shown: str, error: Refused) -> Refused:
    """`error`, unless `name` is a symlink: then the refusal says so."""
    try:
        is_link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        is_link = False
    if is_link:
        return Refused("PermissionError", f"{shown} is a symbolic link; the file tools do not follow links")
    return error


def _open_dirs(root: str, parts: list[str], shown: str, *, make: bool) -> int:
    """The directory at root/parts, opened one component at a time without following any symlink."""
    fd = os.open(root, DIR_FLAGS)
    for part in parts:
        try:
            nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            if not make:
                raise Refused("FileNotFoundError", f"{shown} does not exist") from None
            # FileExistsError: made by a parallel call, or a dangling symlink: the open below decides.
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            try:
                nfd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _link_or(part, fd, f"{shown} (at {part})", Refused("OSError", str(exc))) from None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            not_dir = Refused("NotADirectoryError", f"a parent of {shown} is a file, not a directory")
            raise _link_or(part, fd, f"{shown} (at {part})", not_dir) from None
        os.close(fd)
        fd = nfd
    return fd


def _special(mode: int, shown: str) -> Refused:
    kind = KINDS.get(stat.S_IFMT(mode), "not a regular file")
    return Refused("PermissionError", f"{shown} is {kind}, not a regular file; the file tools refuse it")


def read(root: str, parts: list[str], shown: str, limit: int) -> None:
    if not parts:
        raise Refused("IsADirectoryError", f"{shown} is a directory; use list_files")
    dfd = _open_dirs(root, parts[:-1], shown, make=False)
    try:
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        raise Refused("FileNotFoundError", f"{shown} does not exist") from None
    except OSError as exc:
        raise _link_or(parts[-1], dfd, shown, Refused("OSError", exc.strerror or str(exc))) from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        raise Refused("IsADirectoryError", f"{shown} is a directory; use list_files")
    if not stat.S_ISREG(mode):
        raise _special(mode, shown)
    with os.fdopen(fd, "rb") as f:
        sys.stdout.buffer.write(f.read(limit))


def write(root: str, parts: list[str], shown: str) -> None:
    data = sys.stdin.buffer.read()  # all of it first: the host's write never waits on a refusal
    if not parts:
        raise Refused("IsADirectoryError", f"{shown} is the workspace itself; name a file")
    dfd = _open_dirs(root, parts[:-1], shown, make=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(parts[-1], flags, 0o644, dir_fd=dfd)
    except IsADirectoryError:
        raise Refused("IsADirectoryError", f"{shown} is a directory; name a file") from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a pipe nobody reads, or a socket
            raise _special(os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False).st_mode, shown) from None
        raise _link_or(parts[-1], dfd, shown, Refused("OSError", exc.strerror or str(exc))) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        raise _special(mode, shown)
    os.ftruncate(fd, 0)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def list_dir(root: str, parts: list[str], shown: str) -> None:
    if parts:
        parent = _open_dirs(root, parts[:-1], shown, make=False)
        try:
            fd = os.open(parts[-1], DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            raise Refused("FileNotFoundError", f"{shown} does not exist") from None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            raise _link_or(
                parts[-1], parent, shown, Refused("NotADirectoryError", f"{shown} is a file; use read_file")
            ) from None
    else:
        fd = os.open(root, DIR_FLAGS)
    with os.scandir(fd) as entries:
        listing = [[e.name, e.is_dir(follow_symlinks=False)] for e in entries]
    sys.stdout.write(json.dumps(listing))


def main() -> None:
    op, root, rel, shown = sys.argv[1:5]
    parts = [] if rel == "." else rel.split("/")
    try:
        if op == "read":
            read(root, parts, shown, int(sys.argv[5]))
        elif op == "write":
            write(root, parts, shown)
        else:
            list_dir(root, parts, shown)
    except Refused as exc:
        sys.stderr.write(json.dumps({"error": exc.error, "message": str(exc)}) + "\n")
        sys.exit(2)
    except OSError as exc:
        sys.stderr.write(json.dumps({"error": "OSError", "message": f"{shown}: {exc.strerror}"}) + "\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
