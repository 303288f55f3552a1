"""Concurrency slots of the local backend: one host uid and one cgroup set per sandbox alive at once.

Why slots: RLIMIT_NPROC is counted per uid, so two sandboxes sharing a uid would share a process budget
(and one fork bomb would starve the other); and creating a cgroup per sandbox is slow and leaks on a
crash, so cgroups are made once per slot and reused. A slot is claimed with an exclusive `flock` on its
lock file, so separate processes on one host (pytest workers, two rollout jobs) never share one.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from envhub.sandbox.policy import IsolationPolicy, MiB
from envhub.settings import settings

CGROUP_NAME = "envhub"
CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
"""The cgroup root, uid base, slot count and lock folder are settings (`envhub.settings`), read when used."""
CPU_PERIOD_US = 100_000
PEAK_MEMORY = ("memory", "memory.max_usage_in_bytes")
CPU_USAGE = ("cpuacct", "cpuacct.usage")
OOM_CONTROL = ("memory", "memory.oom_control")


def cgroups_available() -> bool:
    """cgroup v1 with the controllers we need, writable by us (root)."""
    root = settings().cgroup_root
    return os.geteuid() == 0 and all((root / c / "cgroup.procs").exists() for c in CONTROLLERS)


@dataclass
class Slot:
    """A claimed uid (and its cgroups, when cgroups are available)."""

    index: int
    uid: int
    lock_fd: int
    lock: str = ""
    """The lock file's path: what the pool knows its held slots by."""
    cgroups: dict[str, Path] = field(default_factory=dict)
    counter_fds: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def procs_files(self) -> list[str]:
        return [f"{d}/cgroup.procs" for d in self.cgroups.values()]

    def limit(self, policy: IsolationPolicy) -> None:
        """Write the policy's limits into this slot's cgroups (slots are reused with other policies).
        Plain `os` writes on string paths: this runs once an open, and pathlib's objects and text
        wrappers doubled its cost."""
        if not self.cgroups:
            return
        mem, cpu = self.cgroups["memory"], self.cgroups["cpu"]
        limit = str(policy.memory_mb * MiB)
        memsw = f"{mem}/memory.memsw.limit_in_bytes"  # absent where the kernel does not account swap
        # memsw must stay >= the memory limit at every step, so lift it first and set it last.
        has_memsw = _write(memsw, "-1", missing_ok=True)
        _write(f"{mem}/memory.limit_in_bytes", limit)
        if has_memsw:
            _write(memsw, limit)
        _write(f"{self.cgroups['pids']}/pids.max", str(policy.pids + 2))  # + bwrap's two processes
        _write(f"{cpu}/cpu.cfs_period_us", str(CPU_PERIOD_US))
        _write(f"{cpu}/cpu.cfs_quota_us", str(max(1000, int(policy.cpus * CPU_PERIOD_US))))

    def reset_counters(self) -> None:
        """Zero the peak-memory and CPU counters so the next reading covers one command."""
        if not self.cgroups:
            return
        for name in (PEAK_MEMORY, CPU_USAGE):
            with contextlib.suppress(OSError):
                os.pwrite(self._counter(name), b"0", 0)

    def oom_kills(self) -> int:
        if not self.cgroups:
            return 0
        for line in self._read(OOM_CONTROL).splitlines():
            key, _, value = line.partition(b" ")
            if key == b"oom_kill":
                return int(value)
        return 0

    def peak_memory(self) -> int | None:
        if not self.cgroups:
            return None
        return int(self._read(PEAK_MEMORY))

    def cpu_time(self) -> float | None:
        if not self.cgroups:
            return None
        return int(self._read(CPU_USAGE)) / 1e9

    def _read(self, name: tuple[str, str]) -> bytes:
        """A counter's text, read afresh: a cgroup file read from offset 0 is generated anew."""
        return os.pread(self._counter(name), 4096, 0)

    def _counter(self, name: tuple[str, str]) -> int:
        """The counter file's descriptor, opened once per slot: opening a cgroup file (a path walk and
        a kernfs open) cost more than the whole rest of a short command's bookkeeping, four times a
        command. Closed by `close_counters` when the slot is given back."""
        fd = self.counter_fds.get(name)
        if fd is None:
            controller, file = name
            fd = os.open(self.cgroups[controller] / file, os.O_RDWR | os.O_CLOEXEC)
            self.counter_fds[name] = fd
        return fd

    def close_counters(self) -> None:
        for fd in self.counter_fds.values():
            os.close(fd)
        self.counter_fds.clear()

    def pids(self) -> list[int]:
        """Every process in the slot's cgroup: what must be gone before the slot is reused."""
        return cgroup_pids(self._listing) if self.cgroups else []

    @property
    def _listing(self) -> str:
        """The pids controller's `cgroup.procs`: every process of the slot, whatever its uid."""
        return f"{self.cgroups['pids']}/cgroup.procs"

    async def kill_all(self, *, deadline_s: float = 5.0) -> None:
        """SIGKILL everything left in the slot and wait until the cgroup is empty. Without cgroups there
        is nothing to list: the sandbox's pid namespace dies with its init."""
        if not self.cgroups:
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        while pids := sigkill_cgroup(self._listing):
            if loop.time() > end:
                raise RuntimeError(f"processes {pids} in sandbox slot {self.index} survived SIGKILL")
            await asyncio.sleep(0.01)


class SlotPool:
    """Hands out slots, lowest index first, claimed across processes by flock."""

    def __init__(self) -> None:
        self._use_cgroups = cgroups_available()
        self._isolate_uid = os.geteuid() == 0
        self._held: set[str] = set()
        """The lock files this process holds: skipped without a syscall. At concurrency 32 an acquire
        otherwise opened, tried and closed some 40 locks of its own first, a fifth of the host's CPU
        per open."""
        self._made: dict[tuple[Path, int, int], dict[str, Path]] = {}
        """The slot cgroups this process made and handed to a uid: made again only if one went."""

    def acquire(self) -> Slot:
        config = settings()
        lock_dir = config.sandbox_lock_dir
        lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        for index in range(config.sandbox_max_slots):
            lock = f"{lock_dir}/slot{index}.lock"
            if lock in self._held:
                continue
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            uid = config.sandbox_uid_base + index if self._isolate_uid else os.getuid()
            slot = Slot(index=index, uid=uid, lock_fd=fd, lock=lock)
            if self._use_cgroups:
                try:
                    slot.cgroups = self._cgroups(config.cgroup_root, index, uid)
                except OSError:
                    os.close(fd)
                    raise
            self._held.add(lock)
            return slot
        raise RuntimeError(
            f"all {config.sandbox_max_slots} sandbox slots are in use; close sandboxes or raise "
            "ENVHUB_SANDBOX_MAX_SLOTS"
        )

    def release(self, slot: Slot) -> None:
        slot.close_counters()
        self._held.discard(slot.lock)
        os.close(slot.lock_fd)

    def _cgroups(self, root: Path, index: int, uid: int) -> dict[str, Path]:
        made = self._made.get((root, index, uid))
        if made is not None and all(os.path.isdir(d) for d in made.values()):
            return dict(made)
        dirs: dict[str, Path] = {}
        for controller in CONTROLLERS:
            d = root / controller / CGROUP_NAME / f"slot{index}"
            d.mkdir(parents=True, exist_ok=True)
            # Delegate only the join: the slot uid may move itself in (the launcher does, before it
            # execs bwrap); it can change no limit, and no cgroup file is visible inside the sandbox.
            os.chown(d / "cgroup.procs", uid, -1)
            dirs[controller] = d
        self._made[(root, index, uid)] = dirs
        return dict(dirs)


def cgroup_pids(procs: str | Path) -> list[int]:
    """The pids a `cgroup.procs` file lists, read with plain `os` calls (a slot's is read twice an open)."""
    fd = os.open(procs, os.O_RDONLY | os.O_CLOEXEC)
    try:
        text = b""
        while chunk := os.read(fd, 65536):  # the kernel hands a long list over in pieces
            text += chunk
    finally:
        os.close(fd)
    return [int(p) for p in text.split()]


def sigkill_cgroup(procs: str | Path) -> list[int]:
    """SIGKILL every process a `cgroup.procs` file lists, and return those it listed: one round of a
    kill loop, shared by a slot's own (async) and the reaper's (blocking), which repeat it until the
    list comes back empty."""
    pids = cgroup_pids(procs)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _write(path: str, value: str, *, missing_ok: bool = False) -> bool:
    """Write a cgroup file; False if it is absent and `missing_ok` (a controller file this kernel lacks)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)
    return True


_pool: SlotPool | None = None


def slot_pool() -> SlotPool:
    global _pool
    if _pool is None:
        _pool = SlotPool()
    return _pool
