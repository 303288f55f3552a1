"""The `Sandbox` contract every backend keeps; what a command gives back is in `results`."""

from __future__ import annotations

import asyncio
import shlex
import stat
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Self

from envhub.record.sandbox_calls import attach, tape_calls
from envhub.sandbox.intercept import Interceptor, add_ambient, wrap_class
from envhub.sandbox.policy import IsolationPolicy, IsolationReport
from envhub.sandbox.python_repl import PythonWorker
from envhub.sandbox.results import ExecResult, SandboxError, SandboxUnavailable

if TYPE_CHECKING:
    from pathlib import Path

Command = str | Sequence[str]
"""A shell string (run by `/bin/sh -c`) or an argv list (run as is, no shell)."""


MAX_TREE_DEPTH = 256
"""The deepest directory nesting `download` copies out. Deeper trees are refused (OSError) rather than
walked: the host's paths would pass PATH_MAX and its walk would hold a descriptor per level."""


def not_regular(path: str, mode: int) -> PermissionError:
    """The refusal for a host-side read or write of a special file the sandbox planted.

    A named pipe would block the host until someone opens its other end (nobody ever does); sockets
    and devices have no business being copied either.
    """
    kind = (
        "named pipe (FIFO)"
        if stat.S_ISFIFO(mode)
        else "socket"
        if stat.S_ISSOCK(mode)
        else "device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "special file"
    )
    return PermissionError(
        f"{path} is a {kind}, not a regular file; the host only reads and writes regular files"
    )


def to_argv(command: Command) -> list[str]:
    """A shell string runs under `/bin/sh -c`; a sequence is already an argv."""
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    argv = list(command)
    if not argv:
        raise ValueError("the command is empty")
    return argv


def shell_join(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def sandbox_path(path: str | PurePosixPath, workdir: str) -> PurePosixPath:
    """A path inside the sandbox, relative ones read from the workdir; `..` may not climb above /."""
    p = PurePosixPath(workdir) / PurePosixPath(path)
    parts: list[str] = []
    for part in p.parts[1:]:
        if part == "..":
            if not parts:
                raise ValueError(f"{path!s} climbs above the sandbox root")
            parts.pop()
        elif part != ".":
            parts.append(part)
    return PurePosixPath("/", *parts)


class Background(ABC):
    """A program running in a sandbox beside its commands (`Sandbox.start_background`): a session shell,
    a display server, an interpreter. It lives until it ends, `kill()` stops it, or the sandbox closes;
    the commands' own clean-up (each `exec` ends by killing what it left running) spares it and what it
    starts. Only the host holds its pipes. The sandbox's limits (memory, pids, CPU share, no network,
    seccomp, uid) hold for it as for every command; the per-command wall time does not."""

    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader

    @property
    @abstractmethod
    def returncode(self) -> int | None:
        """Its exit status once it has ended (-9 or 137 when killed), else None."""

    @abstractmethod
    async def wait(self) -> int:
        """Wait for it to end; its exit status."""

    @abstractmethod
    async def kill(self) -> None:
        """Kill it and everything it started in the sandbox; returns once they are gone."""


class ProcessBackground(Background):
    """A background program that is a host process (the local backend's own bubblewrap)."""

    def __init__(self, proc: asyncio.subprocess.Process, kill: Callable[[], Awaitable[None]]) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.stdin, self.stdout, self.stderr = proc.stdin, proc.stdout, proc.stderr
        self._kill = kill

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    async def wait(self) -> int:
        return await self.proc.wait()

    async def kill(self) -> None:
        if self.proc.returncode is None:
            await self._kill()


class Sandbox(ABC):
    """An isolated place to run untrusted commands, declared by an `IsolationPolicy`.

    Use it as an async context manager, or call `close()`: a closed sandbox has no process, mount,
    cgroup or container left behind.
    """

    backend: ClassVar[str]
    _interceptors: tuple[Interceptor, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Each backend's calls pass through the interceptors in force (`envhub.sandbox.intercept`): the
        tape of a recorded or replayed episode, a fleet's lease."""
        super().__init_subclass__(**kwargs)
        wrap_class(cls)

    def intercept(self, interceptor: Interceptor) -> None:
        """Put `interceptor` around this sandbox's own calls, inside any already there (a fleet's lease)."""
        self._interceptors = (*self._interceptors, interceptor)

    def __init__(self, policy: IsolationPolicy) -> None:
        self.policy = policy
        self._closed = False

    @abstractmethod
    async def exec(
        self,
        command: Command,
        *,
        stdin: str | bytes | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the per-call limit is the contract
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run a command to completion, killing everything it started if `timeout` (or the policy's
        wall time) passes."""

    @abstractmethod
    async def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        """Create or replace a file in the writable area, making parent directories.

        A symlink or a special file (a named pipe, say) at the path is refused with PermissionError.
        """

    @abstractmethod
    async def read_file(self, path: str) -> bytes:
        """The bytes of a file in the sandbox (FileNotFoundError when absent; PermissionError for a
        named pipe or other special file, which is never opened for reading)."""

    @abstractmethod
    async def upload_dir(self, local_dir: str | Path, dest: str) -> None:
        """Copy a host directory tree into the sandbox's writable area."""

    @abstractmethod
    async def download(self, path: str, local_dest: str | Path) -> None:
        """Copy a file or directory out of the sandbox; symlinks and special files inside are skipped.

        A special file at `path` itself is refused (PermissionError), and so is a tree nested deeper
        than MAX_TREE_DEPTH (OSError).
        """

    @abstractmethod
    def report(self) -> IsolationReport:
        """Which parts of the policy this sandbox enforces, and how."""

    @abstractmethod
    async def _close(self) -> None: ...

    async def reset(self) -> None:
        """Return to a fresh state (no processes, empty writable area) so a pool can reuse the sandbox.

        Whatever the last episode left (a wedged process, a tree deeper than PATH_MAX), the sandbox is
        usable afterwards, or the call raises SandboxError and the sandbox should be closed.

        Backends that cannot do this safely raise NotImplementedError, and pools destroy them instead.
        """
        raise NotImplementedError(f"the {self.backend} backend cannot be recycled")

    async def fork(self) -> Self:
        """A new open sandbox, with the same policy, holding a copy of this one's writable files.

        Nothing is shared: what either does to its files the other never sees. Processes are not
        carried: the copy starts with none running, and files a background process is writing may be
        copied half-written. Backends that cannot copy themselves raise NotImplementedError.
        """
        raise NotImplementedError(
            f"the {self.backend} backend cannot fork a sandbox; use the local or docker backend"
        )

    async def __fork__(self, memo: dict[int, Any]) -> Self:
        """What `Env.fork` puts in a child env where this sandbox was: its fork."""
        return await self.fork()

    def __deepcopy__(self, memo: dict[int, Any]) -> Sandbox:
        """Refused: a copied handle would share (and later close) this sandbox; `fork()` copies it."""
        raise TypeError(
            f"a {type(self).__name__} cannot be deep-copied; `await sandbox.fork()` makes an independent "
            "copy (an env's sandboxes are forked by Env.fork when they are its attributes, or items of them)"
        )

    async def python(self, *, python: str = "python3") -> PythonWorker:
        """A persistent Python interpreter in this sandbox: state survives between `run` calls."""
        worker = PythonWorker(self, python=python)
        if not attach(worker):  # a replayed worker starts nothing: the recording answers its snippets
            await worker.start()
        return worker

    async def start_background(self, command: Command, *, env: Mapping[str, str] | None = None) -> Background:
        """Start a program that outlives the commands around it, with its stdin, stdout and stderr piped
        to the host: what the persistent Python worker and the desktop's session run in.

        Backends that cannot keep a live process raise SandboxUnavailable.
        """
        raise SandboxUnavailable(
            f"the {self.backend} backend cannot run a background program (no persistent worker); "
            "use the local or docker backend"
        )

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Stop everything in the sandbox and release its resources; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        await self._close()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed; open a new one")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<{type(self).__name__} {state}>"


wrap_class(Sandbox)  # its own fork and close, which most backends inherit
add_ambient(tape_calls)
