"""The `local` backend: bubblewrap namespaces + cgroup v1 limits + a non-root uid, no daemon on the host.

A sandbox's commands run through its exec server (`exec_server.py`, driven from the host by
`exec_client.py`): one bubblewrap per sandbox, started with the first command (or ahead of time by a
pool), whose pid 1 spawns each command and kills all it left behind when it ends. A command that arrives
while another runs, or a sandbox whose server cannot start, gets one `bwrap` invocation into fresh
namespaces of its own, as every command once did. What persists between commands is the writable scratch
area (a size-capped tmpfs on the host, bound at the workdir, /tmp and /dev/shm). Every bubblewrap is
started through a short `sh` launcher that, already running as the slot's uid (util-linux's `setpriv`
drops to it first, as root), joins the slot's cgroups and lowers rlimits before it execs bwrap: so the
limits hold from the first instruction of the sandbox, without a `preexec_fn` (unsafe next to the event
loop's threads), and subprocess can start it with a vfork rather than a fork of the whole host process.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import math
import os
import resource
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Literal

from envhub.sandbox import native, pidfd_child, seccomp
from envhub.sandbox.base import Background, Command, ProcessBackground, Sandbox, sandbox_path, to_argv
from envhub.sandbox.bwrap import (
    DEFAULT_PATH,
    ETC_FILES,
    NETWORK_ETC_FILES,
    SYSTEM_DIRS,
    bwrap_info,
    read_status,
    read_status_so_far,
)
from envhub.sandbox.cleanup import finish
from envhub.sandbox.exec_client import BOOTSTRAP, Capture, ExecServer, Outcome, ServerStartError
from envhub.sandbox.libc import become_subreaper, reap, umount
from envhub.sandbox.local_fork import copy_areas
from envhub.sandbox.pidfd_child import PidfdChild
from envhub.sandbox.policy import Enforcement, IsolationPolicy, IsolationReport, MiB
from envhub.sandbox.results import ExecResult, SandboxError, SandboxTimeout
from envhub.sandbox.safe_files import download_beneath, read_beneath, upload_beneath, write_beneath
from envhub.sandbox.scratch import (
    CLEANUP_TIMEOUT_S,
    STAGING,
    fill_scratch,
    remove_scratch,
    remove_tree,
    scratch_prefix,
    sweep_stale_scratch,
)
from envhub.sandbox.slots import Slot, slot_pool

KILL_GRACE_S = 5.0
"""How long a SIGKILLed command may take to die and close its pipes before the host gives up on it."""
SHELL_UNITS = {"f": 512, "v": 1024}
"""The bytes in one unit of the shell's `ulimit -f` and `ulimit -v`."""
DEV_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""The host's device nodes that bwrap's `--dev` binds into a sandbox."""
SETPRIV = shutil.which("setpriv", path=DEFAULT_PATH)
"""util-linux's setpriv: as root, it drops each bubblewrap start to the slot's uid (real, effective and
saved; its gid likewise, no supplementary groups), which lets subprocess start it with a vfork."""


Child = asyncio.subprocess.Process | PidfdChild
"""A bwrap this sandbox started: by asyncio where the host talks to it through pipes, else (the exec
server, where the kernel has pidfds) without asyncio's subprocess machinery (envhub.sandbox.pidfd_child)."""

_unclosed: set[LocalSandbox] = set()
"""Every local sandbox opened and not yet closed in this process: abandoned at exit (below)."""


class LocalSandbox(Sandbox):
    """A bubblewrap sandbox on this machine. Open it with `envhub.sandbox.open("local", policy=...)`."""

    backend: ClassVar[str] = "local"

    def __init__(
        self, policy: IsolationPolicy, *, bwrap: str, version: tuple[int, ...], slot: Slot, scratch: Path
    ) -> None:
        super().__init__(policy)
        self._bwrap = bwrap
        self._version = version
        self._slot = slot
        self._scratch = scratch
        self._mounted = os.geteuid() == 0
        self._areas = {policy.workdir: scratch / "work", "/tmp": scratch / "tmp", "/dev/shm": scratch / "shm"}
        self._children: set[Child] = set()
        self._status_fds: dict[Child, int] = {}
        self._inits: dict[Child, int] = {}
        """Host pids of sandbox inits known while they run (the exec server's), to kill them directly."""
        self._reapers: set[asyncio.Task[None]] = set()
        self._server: ExecServer | None = None
        self._server_lock = asyncio.Lock()
        self._server_error: str | None = None
        """Why this sandbox's exec server could not start; its commands then each get a bwrap."""
        self._on_closed: list[Callable[[], None]] = []
        self._launchers: dict[bool, tuple[str, ...]] = {}
        _unclosed.add(self)

    @classmethod
    async def create(cls, policy: IsolationPolicy, *, start_server: bool = False) -> LocalSandbox:
        """A new sandbox (`open("local")` may hand out a started spare instead: envhub.sandbox.spares).
        `start_server` starts the exec server now rather than with the first command: what pools do, so
        that their sandboxes are ready to run."""
        sandbox = await cls._new(policy)
        if start_server:
            try:
                await sandbox._server_ready()
            except BaseException:
                await finish(sandbox.close())
                raise
        return sandbox

    @classmethod
    async def _new(cls, policy: IsolationPolicy) -> LocalSandbox:
        bwrap, version = await bwrap_info()
        become_subreaper()
        slot = slot_pool().acquire()
        scratch: Path | None = None
        try:
            await slot.kill_all()  # a crashed owner may have left processes behind
            slot.limit(policy)
            sweep_stale_scratch()
            scratch = Path(tempfile.mkdtemp(prefix=scratch_prefix()))
            fill_scratch(scratch, policy, slot.uid)
        except BaseException:
            if scratch is not None:
                with contextlib.suppress(OSError, SandboxError):  # the error worth raising is the first
                    remove_scratch(scratch)
            slot_pool().release(slot)
            raise
        return cls(policy, bwrap=bwrap, version=version, slot=slot, scratch=scratch)

    # -- running commands ---------------------------------------------------------------------------

    def _bwrap_args(
        self, env: Mapping[str, str], cwd: str, seccomp_fd: int | None, status_fd: int | None, *, server: bool
    ) -> list[str]:
        """bwrap's arguments; for the exec server (`server`), its process is the namespace's pid 1 and
        gets only the base environment (each command's own comes with its request)."""
        p = self.policy
        args = [self._bwrap, "--unshare-all", "--unshare-user"]
        if self._version >= (0, 8):
            args.append("--disable-userns")
        if p.network:
            args.append("--share-net")
        args += ["--die-with-parent", "--new-session", "--clearenv"]
        if status_fd is not None:
            args += ["--json-status-fd", str(status_fd)]
        args += self._mounts
        if server and self._helper is not None:
            args += ["--ro-bind", str(self._helper), native.INSIDE]
        args += ["--remount-ro", "/"]  # bwrap's own root tmpfs: no stray writable place outside the scratch
        for key, value in (self._base_env() if server else self._command_env(env)).items():
            args += ["--setenv", key, value]
        args += ["--chdir", cwd]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        if server:
            args.append("--as-pid-1")
        return args

    def _base_env(self) -> dict[str, str]:
        return {"PATH": DEFAULT_PATH, "HOME": self.policy.workdir, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}

    def _command_env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        """A command's whole environment: the base, the policy's variables, the call's own."""
        return {**self._base_env(), **self.policy.env, **(env or {})}

    @functools.cached_property
    def _mounts(self) -> list[str]:
        """bwrap's mount arguments: the same for every process of this sandbox, so built once."""
        return [arg for mount in self._mount_ops for arg in mount]

    @functools.cached_property
    def _mount_ops(self) -> list[tuple[str, ...]]:
        """bwrap's mount options in order, each with its arguments (a bind's host source first)."""
        p = self.policy
        ops: list[tuple[str, ...]] = list(_system_dirs())
        ops += [("--ro-bind-try", f, f) for f in ETC_FILES + (NETWORK_ETC_FILES if p.network else ())]
        ops += [("--proc", "/proc"), ("--dev", "/dev")]
        ops += [("--bind", str(host), inside) for inside, host in self._areas.items()]
        ops += [("--ro-bind", host_path, inside) for host_path, inside in p.ro_binds.items()]
        return ops

    def _launcher(self, *, cpu_rlimit: bool) -> tuple[str, ...]:
        """What runs before bwrap: it joins the slot's cgroups and lowers rlimits (backstops), then execs
        bwrap as the slot's uid; built once per sandbox for each `cpu_rlimit`. The C helper's `launch`
        (envhub.sandbox.native) where it is built, which as root also drops to the uid itself and hands
        bwrap a mount namespace of `_kept_paths` alone; else `sh -c` (after `setpriv`, see _command_line).

        RLIMIT_CPU is left off for the persistent worker: it would cap the whole session's CPU, not a call's.
        The exec server keeps it: each command it spawns inherits it with a CPU clock of its own, as with
        a bwrap per command, and the server retires long before its own clock reaches it.
        """
        built = self._launchers.get(cpu_rlimit)
        if built is not None:
            return built
        p = self.policy
        limits = [  # (the shell's ulimit flag, the rlimit, its value in the rlimit's own unit)
            ("p", resource.RLIMIT_NPROC, p.pids + 2),  # counted per uid, and each slot has its own uid
            ("f", resource.RLIMIT_FSIZE, p.disk_mb * MiB),
            ("v", resource.RLIMIT_AS, max(p.memory_mb * 4, p.memory_mb + 2048) * MiB),  # generous
            ("c", resource.RLIMIT_CORE, 0),
            ("n", resource.RLIMIT_NOFILE, 4096),
        ]
        if cpu_rlimit:
            limits.append(("t", resource.RLIMIT_CPU, math.ceil(p.wall_time_s * max(1.0, p.cpus)) + 1))
        procs = self._slot.procs_files
        if self._helper is not None:
            uid = str(self._slot.uid) if self._uid_drop == "helper" else "-"
            settings = [f"{number}={value}" for _, number, value in limits]
            kept = self._kept_paths() if self._uid_drop == "helper" else []
            built = (
                str(self._helper),
                "launch",
                uid,
                str(len(procs)),
                *map(str, procs),
                str(len(settings)),
                *settings,
                str(len(kept)),
                *([str(self._scratch / STAGING), *kept] if kept else []),
                "--",
            )
        else:
            lines = [f'echo $$ > "{f}" || exit 125' for f in procs]
            lines += [f"ulimit -{flag} {value // SHELL_UNITS.get(flag, 1)}" for flag, _, value in limits]
            built = ("/bin/sh", "-c", "\n".join([*lines, 'exec "$@"']), "envhub-sandbox")
        self._launchers[cpu_rlimit] = built
        return built

    def _kept_paths(self) -> list[str]:
        """The host paths a bubblewrap start of this sandbox reads, the only ones the launcher leaves in
        the mount namespace it hands bwrap (as root; exec_server.c, trim_mounts): every bind's source,
        /proc (a new proc mount needs the host's in sight), the device nodes `--dev` binds, bwrap itself
        and the helper."""
        sources = [op[1] for op in self._mount_ops if op[0] in ("--ro-bind", "--ro-bind-try", "--bind")]
        return [self._bwrap, str(self._helper), "/proc", *DEV_NODES, *sources]

    @functools.cached_property
    def _helper(self) -> Path | None:
        """The C helper (envhub.sandbox.native) that launches bwrap and serves execs, if built: chosen
        once, so a sandbox's launcher and server never mix."""
        return native.exec_server()

    @functools.cached_property
    def _uid_drop(self) -> Literal["helper", "setpriv", "subprocess"] | None:
        """Who drops root to the slot's uid before bwrap runs: the C helper's launcher ("helper"),
        `setpriv`, or subprocess itself ("subprocess": it then forks the whole host process instead of a
        vfork, several milliseconds more with the event loop blocked); None when not root."""
        if os.geteuid() != 0:
            return None
        if self._helper is not None:
            return "helper"
        return "setpriv" if SETPRIV is not None else "subprocess"

    def _command_line(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None,
        workdir: str,
        seccomp_fd: int | None,
        status_fd: int,
        persistent: bool,
        server: bool,
    ) -> list[str]:
        """The one builder of a bubblewrap start, for a command and for the exec server alike: the drop
        to the slot's uid (as root, by `setpriv`), the launcher, bwrap with its arguments, then argv."""
        line = [
            *self._launcher(cpu_rlimit=not persistent),
            *self._bwrap_args(env or {}, workdir, seccomp_fd, status_fd, server=server),
            "--",
            *argv,
        ]
        if self._uid_drop == "setpriv" and SETPRIV is not None:
            uid = self._slot.uid
            line = [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *line]
        return line

    async def _start(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None,
        cwd: str | None,
        stdin: int,
        stdout: int = asyncio.subprocess.PIPE,
        stderr: int = asyncio.subprocess.PIPE,
        persistent: bool = False,
        server_fd: int | None = None,
    ) -> tuple[Child, int]:
        """Start argv in the sandbox: the process, and the read end of bwrap's status pipe (which must
        stay open while the process runs: bwrap gets SIGPIPE writing to a closed one).

        `server_fd` starts the exec server: that socket is passed in, and argv runs as pid 1.
        """
        self._check_open()
        sec_fd = seccomp.memfd() if self.policy.seccomp and seccomp.supported() else None
        status_r, status_w = os.pipe()
        fds = (status_w,) if sec_fd is None else (status_w, sec_fd)
        try:
            cmd = self._command_line(
                argv,
                env=env,
                workdir=self._workdir(cwd),
                seccomp_fd=sec_fd,
                status_fd=status_w,
                persistent=persistent,
                server=server_fd is not None,
            )
            ids = self._slot.uid if self._uid_drop == "subprocess" else None
            start: dict[str, Any] = dict(
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env={"PATH": DEFAULT_PATH},
                cwd="/",
                pass_fds=fds if server_fd is None else (*fds, server_fd),
                start_new_session=True,
                user=ids,
                group=ids,
                extra_groups=None if ids is None else [],
            )
            proc: Child
            if server_fd is not None and pidfd_child.supported():  # its pipes are plain descriptors
                proc = PidfdChild(cmd, **start)
            else:
                limit = 4 * self.policy.max_output_bytes + 65536  # one worker reply line
                proc = await asyncio.create_subprocess_exec(*cmd, limit=limit, **start)
        except BaseException:
            # Cancelled while starting: asyncio killed bwrap, but an init bwrap had already cloned dies
            # only after it, as an orphan of ours (we are its subreaper): reap it, or a zombie stays.
            await asyncio.shield(self._reap_init(read_status(status_r)))
            raise
        finally:
            for fd in fds:
                os.close(fd)
        self._children.add(proc)
        return proc, status_r

    def _workdir(self, cwd: str | None) -> str:
        """A command's working directory in the sandbox: `cwd` (relative to the workdir), or the workdir."""
        return str(sandbox_path(cwd, self.policy.workdir)) if cwd else self.policy.workdir

    async def exec(
        self,
        command: Command,
        *,
        stdin: str | bytes | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the per-call limit is the contract
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        argv = to_argv(command)
        limit = min(timeout, self.policy.wall_time_s) if timeout is not None else self.policy.wall_time_s
        self._check_open()
        data = stdin.encode() if isinstance(stdin, str) else stdin
        if not self._server_lock.locked():  # a concurrent command gets its own namespaces instead
            async with self._server_lock:
                server = await self._server_or_none()
                if server is not None:
                    on_server = functools.partial(
                        server.run,
                        argv,
                        env=self._command_env(env),
                        cwd=self._workdir(cwd),
                        timeout=limit,
                        stdin=data,
                        cap=self.policy.max_output_bytes,
                    )
                    return await self._measured(on_server)
        return await self._exec_in_own_namespaces(argv, data, limit, env, cwd)

    async def _exec_in_own_namespaces(
        self,
        argv: list[str],
        stdin: bytes | None,
        limit: float,
        env: Mapping[str, str] | None,
        cwd: str | None,
    ) -> ExecResult:
        """The command in a bubblewrap of its own: fresh namespaces, torn down when it ends."""
        own = functools.partial(self._run_in_own_namespaces, argv, stdin, limit, env, cwd)
        return await self._measured(own)

    async def _measured(self, run: Callable[[], Awaitable[Outcome]]) -> ExecResult:
        """A command's result, with the slot's counters (CPU, peak memory, OOM kills) read around it."""
        loop = asyncio.get_running_loop()
        slot = self._slot
        slot.reset_counters()
        oom_before = slot.oom_kills()
        started = loop.time()
        outcome = await run()
        oom = slot.oom_kills() > oom_before
        if outcome.lost and not oom:
            raise SandboxError(
                "the sandbox's exec server died while a command ran, and not for want of memory; "
                "its result is unknown. The next command starts a new server; if this repeats, close "
                "this sandbox and open a new one"
            )
        return self._result(outcome, oom, loop.time() - started)

    def _result(self, outcome: Outcome, oom: bool, wall: float) -> ExecResult:
        slot = self._slot
        code = outcome.exit_code
        if outcome.lost:  # the server was killed for memory: so was the command, with its namespace
            code = 128 + signal.SIGKILL
        return ExecResult(
            stdout=outcome.stdout.decode(errors="replace"),
            stderr=outcome.stderr.decode(errors="replace"),
            exit_code=-1 if outcome.timed_out else code,
            timed_out=outcome.timed_out,
            oom_killed=oom,
            output_truncated=outcome.truncated,
            wall_time_s=wall,
            cpu_time_s=slot.cpu_time(),
            peak_memory_bytes=slot.peak_memory(),
        )

    async def _server_or_none(self) -> ExecServer | None:
        """The running exec server, started if need be; None if it cannot start in this sandbox."""
        if self._server_error is not None:
            return None
        try:
            return await self._server_ready()
        except ServerStartError as exc:
            self._server_error = str(exc)
            return None

    async def _server_ready(self) -> ExecServer:
        if self._server is not None and self._server.alive:
            return self._server
        if self._server is not None:
            await self._server.stop()  # retired or dead: make sure its namespace is gone and reaped
        self._server = None
        if (why := native.missing()) is not None:
            raise ServerStartError(why)
        # Plain pipes, not asyncio's: Python 3.11's subprocess start, cancelled before its pipes are
        # connected (a pool closing while it warms), waits forever for them to close.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        source_r, source_w = os.pipe()
        errors_r, errors_w = os.pipe()
        program = [native.INSIDE] if self._helper is not None else BOOTSTRAP
        try:
            proc, status_r = await self._start(
                [*program, str(theirs.fileno())],
                env=None,
                cwd=None,
                stdin=source_r,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=errors_w,
                server_fd=theirs.fileno(),
            )
        except BaseException:
            ours.close()
            os.close(source_w)
            os.close(errors_r)
            raise
        finally:
            theirs.close()
            os.close(source_r)
            os.close(errors_w)
        self._status_fds[proc] = status_r
        server = ExecServer(proc, ours, kill=lambda: self._kill(proc, reap_init=True))
        if self._helper is not None:
            os.close(source_w)  # the C server reads no source: its stdin sees EOF
        await server.start(source=None if self._helper is not None else source_w, errors=errors_r)
        init = read_status_so_far(status_r).get("child-pid")
        if isinstance(init, int):
            self._inits[proc] = init
        self._server = server
        return server

    async def _stop_server(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop()

    async def _run_in_own_namespaces(
        self,
        argv: list[str],
        stdin: bytes | None,
        limit: float,
        env: Mapping[str, str] | None,
        cwd: str | None,
    ) -> Outcome:
        loop = asyncio.get_running_loop()
        started = loop.time()
        pipe = asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL
        proc, status_r = await self._start(argv, env=env, cwd=cwd, stdin=pipe)
        assert isinstance(proc, asyncio.subprocess.Process)  # not the server: asyncio started it
        assert proc.stdout is not None and proc.stderr is not None
        out, err = Capture(self.policy.max_output_bytes), Capture(self.policy.max_output_bytes)
        tasks = [asyncio.create_task(out.read(proc.stdout)), asyncio.create_task(err.read(proc.stderr))]
        if stdin is not None:
            # Fed alongside the wait, not before it: a command that never reads its stdin (or writes
            # it into a pipe nobody reads) must not stall the host past the command's own limit.
            assert proc.stdin is not None
            tasks.append(asyncio.create_task(_feed(proc.stdin, stdin)))
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), max(0.0, limit - (loop.time() - started)))
            except TimeoutError:
                timed_out = True
                await self._kill(proc)
            # The pipes are at EOF once the sandbox's pid namespace is gone; the grace only bounds it.
            _, unread = await asyncio.wait(tasks[:2], timeout=KILL_GRACE_S)
            if unread:
                out.cut = err.cut = True
        finally:
            killed = timed_out or proc.returncode is None
            if proc.returncode is None:  # cancelled, or a failure above: leave nothing running
                await asyncio.shield(self._kill(proc))
            for task in tasks:
                task.cancel()
            self._children.discard(proc)
            status = read_status(status_r)
            if killed:
                # The sandbox's init is reaped only after every process in its pid namespace is gone.
                await asyncio.shield(self._reap_init(status))
            else:
                self._reap_later(status)
        if "child-pid" not in status and not timed_out:
            raise SandboxError(
                f"bubblewrap could not set up the sandbox (exit {proc.returncode}): "
                f"{err.data.decode(errors='replace').strip()}"
            )
        assert proc.returncode is not None
        return Outcome(proc.returncode, timed_out, out.data, err.data, out.cut or err.cut)

    async def start_background(self, command: Command, *, env: Mapping[str, str] | None = None) -> Background:
        """A bubblewrap of its own beside the exec server's: the slot's uid and cgroups, the same scratch
        (workdir, /tmp, /dev/shm) and policy, its own pid and network namespaces, so no command's clean-up
        reaches it; no RLIMIT_CPU (it would cap the whole session, not a call)."""
        proc, status_r = await self._start(
            to_argv(command), env=env, cwd=None, stdin=asyncio.subprocess.PIPE, persistent=True
        )
        assert isinstance(proc, asyncio.subprocess.Process)  # not the server: asyncio started it
        self._status_fds[proc] = status_r
        return ProcessBackground(proc, functools.partial(self._kill, proc))

    def _reap_later(self, status: dict[str, Any]) -> None:
        task = asyncio.create_task(self._reap_init(status))
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)

    async def _reap_init(self, status: dict[str, Any]) -> None:
        """Reap the sandbox init a bwrap reported (`child-pid` in its status) once it dies.

        A bwrap killed before it reported leaves an init we cannot name; any orphaned init of this slot
        is then reaped: our child (we are the subreaper), of the slot's uid, and pid 1 of its namespace.
        """
        init = status.get("child-pid")
        for pid in (
            [init] if isinstance(init, int) else await asyncio.to_thread(_orphaned_inits, self._slot.uid)
        ):
            await _reap_now(pid)

    async def _kill(self, proc: Child, *, reap_init: bool = False) -> None:
        """Kill one command's whole tree: bwrap's process group; its pid namespace dies with its init.

        `reap_init` waits until that init is reaped too (so no process of the namespace is left when
        this returns), rather than reaping it in the background.
        Raises SandboxTimeout if it is not gone within KILL_GRACE_S (a process stuck in the kernel).
        """
        init = self._inits.pop(proc, None)
        if init is not None:  # at once, rather than when bwrap's death reaches it (--die-with-parent)
            with contextlib.suppress(ProcessLookupError):
                os.kill(init, signal.SIGKILL)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group is gone; asyncio's watcher reaps bwrap (Popen.kill would steal that)
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if proc.stdin is not None and not proc.stdin.transport.is_closing():
            proc.stdin.transport.abort()  # nobody is left to read what is still queued for it
        try:
            await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
        except TimeoutError:
            raise SandboxTimeout(
                f"a sandbox process (pid {proc.pid}) did not die within {KILL_GRACE_S:g} s of SIGKILL; "
                "close this sandbox and open a new one"
            ) from None
        finally:
            self._children.discard(proc)
            fd = self._status_fds.pop(proc, None)
            if fd is not None:
                status = read_status(fd)
                if init is not None:
                    status.setdefault("child-pid", init)  # its line was read while it ran
                if reap_init:
                    await asyncio.shield(self._reap_init(status))
                else:
                    self._reap_later(status)

    # -- files ----------------------------------------------------------------------------------------

    def _host_path(self, path: str) -> tuple[Path, list[str]] | None:
        """(writable area root on the host, path parts below it), or None outside the writable area."""
        p = sandbox_path(path, self.policy.workdir)
        for inside, host in self._areas.items():
            prefix = PurePosixPath(inside)
            if p == prefix or prefix in p.parents:
                return host, list(p.relative_to(prefix).parts)
        return None

    def _writable(self, path: str) -> tuple[Path, list[str]]:
        where = self._host_path(path)
        if where is None or not where[1]:
            raise PermissionError(f"{path} is outside the sandbox's writable area ({', '.join(self._areas)})")
        return where

    async def write_file(self, path: str, data: str | bytes, *, mode: int = 0o644) -> None:
        self._check_open()
        root, parts = self._writable(path)
        payload = data.encode() if isinstance(data, str) else data
        await asyncio.to_thread(write_beneath, root, parts, payload, mode, self._slot.uid)

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        where = self._host_path(path)
        if where is not None and where[1]:
            return await asyncio.to_thread(read_beneath, *where)
        # Outside the writable area: read it as the sandbox sees it, with the sandbox's rights.
        result = await self.exec(["cat", "--", str(sandbox_path(path, self.policy.workdir))])
        if result.exit_code != 0:
            if "No such file" in result.stderr:
                raise FileNotFoundError(path)
            raise PermissionError(f"reading {path} in the sandbox failed: {result.stderr.strip()}")
        return result.stdout.encode()

    async def upload_dir(self, local_dir: str | Path, dest: str) -> None:
        self._check_open()
        root, parts = self._writable(dest)
        await asyncio.to_thread(upload_beneath, Path(local_dir), root, parts, self._slot.uid)

    async def download(self, path: str, local_dest: str | Path) -> None:
        self._check_open()
        where = self._host_path(path)
        if where is None:
            raise PermissionError(f"{path} is outside the sandbox's writable area; copy it there first")
        deadline = time.monotonic() + self.policy.wall_time_s
        await asyncio.to_thread(download_beneath, where[0], where[1], Path(local_dest), deadline)

    # -- lifecycle ------------------------------------------------------------------------------------

    async def fork(self) -> LocalSandbox:
        """A new sandbox with this policy and a copy of the writable areas (see `local_fork`)."""
        self._check_open()
        child = await LocalSandbox.create(self.policy)
        try:
            uids = self._slot.uid, child._slot.uid
            await copy_areas(self._areas, uids[0], child._areas, uids[1], limit_s=self.policy.wall_time_s)
        except BaseException:
            await finish(child.close())
            raise
        return child

    async def reset(self) -> None:
        self._check_open()
        await self._stop_server()  # its namespaces (IPC objects included) go; the next command starts anew
        for proc in list(self._children):
            await self._kill(proc)
        await self._slot.kill_all()
        await asyncio.to_thread(self._renew_scratch)

    def _renew_scratch(self) -> None:
        """Empty the writable area in a time that does not depend on what the sandbox left in it.

        As root the scratch tmpfs is unmounted and a fresh one mounted: the old one, however deep or
        full, goes at once. Otherwise each area is removed by an iterative walk with a deadline.
        """
        if self._mounted:
            umount(str(self._scratch))
            fill_scratch(self._scratch, self.policy, self._slot.uid)
            return
        deadline = time.monotonic() + CLEANUP_TIMEOUT_S
        for area in self._areas.values():
            remove_tree(area, deadline=deadline)
            area.mkdir(mode=0o700)
            os.chown(area, self._slot.uid, self._slot.uid)

    def on_closed(self, callback: Callable[[], None]) -> None:
        """Call `callback` once this sandbox is closed and its resources are free (at once if it is):
        how the spares start a taken spare's replacement when the episode ends."""
        if self._closed:
            callback()
        else:
            self._on_closed.append(callback)

    async def _close(self) -> None:
        try:
            await self._stop_server()
            for proc in list(self._children):
                await self._kill(proc)
            await self._slot.kill_all()
            await asyncio.gather(*self._reapers)
        finally:
            try:
                await asyncio.to_thread(remove_scratch, self._scratch)
            finally:
                _unclosed.discard(self)
                slot_pool().release(self._slot)
                for callback in self._on_closed:
                    callback()

    def abandon(self) -> None:
        """Close without an event loop, when none is left to do it (interpreter exit): SIGKILL what runs
        and reap it, remove the scratch area, free the slot. A close begun and never finished (its loop
        closed under it) is finished here too."""
        if self not in _unclosed:
            return  # closed, or abandoned, already: the slot is free
        self._closed = True
        try:
            if self._server is not None:
                self._server.hang_up()
            pids = [proc.pid for proc in self._children]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
            for proc, fd in self._status_fds.items():
                init = self._inits.get(proc, read_status(fd).get("child-pid"))
                if isinstance(init, int):
                    pids.append(init)
            _reap_blocking(pids, time.monotonic() + KILL_GRACE_S)
            remove_scratch(self._scratch)
        finally:
            _unclosed.discard(self)
            slot_pool().release(self._slot)

    def report(self) -> IsolationReport:
        """What holds each control of this sandbox, read from its policy, slot and the host."""
        p, slot = self.policy, self._slot
        root = os.geteuid() == 0
        sec = p.seccomp and seccomp.supported()
        controls = {
            "network": Enforcement(
                enforced=True,
                how="host network shared (policy allows it)"
                if p.network
                else "fresh network namespace (bwrap --unshare-all): loopback only, no DNS",
            ),
            "filesystem": Enforcement(
                enforced=True,
                how="new mount namespace: read-only /usr (+ /bin, /lib symlinks) and a few /etc files; "
                f"read-only binds {sorted(p.ro_binds.values()) or 'none'}; nothing else of the host",
            ),
            **self._limit_controls(),
            "user": Enforcement(
                enforced=True,
                how=f"host uid {slot.uid} (one per concurrent slot), no capabilities, no supplementary groups"
                if root
                else f"your own uid {slot.uid} in a user namespace, no capabilities",
            ),
            "environment": Enforcement(
                enforced=True,
                how="--clearenv: only PATH, HOME, LANG, TMPDIR and the policy's variables",
            ),
            "seccomp": Enforcement(
                enforced=sec,
                how=f"BPF deny-list of {len(seccomp.DENIED_X86_64)} calls (ptrace, mount, unshare, setns, "
                "keyctl, bpf, io_uring, ...) -> EPERM"
                if sec
                else ("disabled by the policy" if not p.seccomp else "no filter for this architecture"),
            ),
            "nested_namespaces": Enforcement(
                enforced=self._version >= (0, 8) or sec,
                how="bwrap --disable-userns" + (" and seccomp (unshare, setns)" if sec else "")
                if self._version >= (0, 8)
                else ("seccomp blocks unshare/setns" if sec else "not blocked (bwrap < 0.8, no seccomp)"),
            ),
        }
        details = {
            "bwrap": f"{self._bwrap} {'.'.join(map(str, self._version))}",
            "slot": str(slot.index),
            "uid": str(slot.uid),
            "exec_server": self._server_state(),
        }
        return IsolationReport(backend=self.backend, policy=p, controls=controls, details=details)

    def _limit_controls(self) -> dict[str, Enforcement]:
        """How each resource limit holds: by cgroup when the slot has one, by rlimit as a backstop."""
        p, slot = self.policy, self._slot
        cg = bool(slot.cgroups)
        root = os.geteuid() == 0
        return {
            "disk": Enforcement(
                enforced=root,
                how=f"one tmpfs (size={p.disk_mb} MiB, nr_inodes={p.max_files}) backs {p.workdir}, /tmp and "
                "/dev/shm together; RLIMIT_FSIZE per file as backstop"
                if root
                else "plain directory (not root: cannot mount a capped tmpfs); RLIMIT_FSIZE per file only",
            ),
            "memory": Enforcement(
                enforced=cg,
                how=f"cgroup v1 memory.limit_in_bytes={p.memory_mb} MiB (+memsw) for the whole tree, "
                "tmpfs pages and the exec server's own (about 4 MiB) included; RLIMIT_AS backstop"
                if cg
                else "RLIMIT_AS per process only (no writable cgroup v1 memory controller)",
            ),
            "pids": Enforcement(
                enforced=True,
                how=f"cgroup v1 pids.max={p.pids + 2} and RLIMIT_NPROC on a per-slot uid"
                if cg
                else f"RLIMIT_NPROC={p.pids + 2} (per uid)",
            ),
            "cpu": Enforcement(
                enforced=cg,
                how=f"cgroup v1 CFS quota {p.cpus} CPU; RLIMIT_CPU backstop"
                if cg
                else "RLIMIT_CPU per process only",
            ),
            "wall_time": Enforcement(
                enforced=True,
                how="at a command's end or timeout the sandbox's exec server, its pid 1 (no signal from "
                "inside reaches it), SIGKILLs and reaps every other process in it; a server that does not "
                "answer has its bwrap SIGKILLed, and the pid namespace dies with it (--die-with-parent). "
                "A command in a bwrap of its own: bwrap's process group is SIGKILLed at its timeout",
            ),
        }

    def _server_state(self) -> str:
        if self._server_error is not None:
            return f"unavailable, each command gets a bwrap of its own: {self._server_error}"
        if self._server is not None and self._server.alive:
            return "running"
        return "starts with the next command"

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<LocalSandbox slot={self._slot.index} uid={self._slot.uid} {state}>"


# -- helpers ------------------------------------------------------------------------------------------


@functools.cache
def _system_dirs() -> tuple[tuple[str, str, str], ...]:
    """bwrap's options for the host's system directories (a symlink stays one), read once: they do
    not change while a program runs."""
    ops: list[tuple[str, str, str]] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            ops.append(("--symlink", os.readlink(d), d))
        elif os.path.isdir(d):
            ops.append(("--ro-bind", d, d))
    return tuple(ops)


def _reap_blocking(pids: list[int], deadline: float) -> None:
    """Reap these children (bwraps, and sandbox inits whose bwrap is gone) as they die, until `deadline`.

    For when no event loop is left: exiting without reaping would hand them, dead, to our own parent.
    """
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped (by asyncio's watcher, by its bwrap), or not ours yet:
                done = 0 if os.path.exists(f"/proc/{pid}") else pid  # an init whose bwrap is dying
            if done:
                pending.discard(pid)
        if pending:
            time.sleep(0.005)


def _orphaned_inits(uid: int) -> list[int]:
    """Our child processes of `uid` that are pid 1 of a namespace: sandbox inits whose bwrap is gone."""
    me, found = [str(os.getpid())], []
    for path in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in path.read_text().splitlines() if ":" in line)
        except OSError:
            continue  # gone while we looked
        ppid, uids, nspid = (fields.get(key, "").split() for key in ("PPid", "Uid", "NSpid"))
        if ppid == me and uids[:1] == [str(uid)] and nspid[1:] == ["1"]:
            found.append(int(path.parent.name))
    return found


async def _reap_now(pid: int) -> None:
    """Reap an adopted sandbox init as soon as it dies (a pidfd says when); bounded by KILL_GRACE_S."""
    try:
        await asyncio.wait_for(pidfd_child.exited(pid), KILL_GRACE_S)
    except OSError:  # already reaped, or a kernel without pidfds: poll instead
        await reap(pid)
        return
    except TimeoutError:
        pass
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks


async def _feed(pipe: asyncio.StreamWriter, data: str | bytes) -> None:
    """Write a command's stdin and close it; the caller bounds this by the command's own timeout."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        pipe.write(data.encode() if isinstance(data, str) else data)
        await pipe.drain()
        pipe.close()


@atexit.register
def _abandon_unclosed() -> None:
    """Close what a program left open when it ends (no `close`, or its event loop gone before it): its
    processes die with it anyway, but its scratch tmpfs would stay mounted, and with this process's
    owner lease removed at exit no later sweep could tell it was orphaned for a day (NO_LEASE_GRACE_S),
    while every bubblewrap start on the host copies each such mount into its namespace."""
    if _unclosed:  # their loop is closed: asyncio's child watcher would warn of each process killed here
        logging.getLogger("asyncio").setLevel(logging.ERROR)
    for sandbox in list(_unclosed):
        with contextlib.suppress(Exception):
            sandbox.abandon()
