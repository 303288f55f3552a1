"""Who owns a sandbox, and whether that owner still lives: an identity no PID namespace can mistake.

A pid means something only in the PID namespace that gave it, and a hostname is shared by every
container with host networking. An envhub process in another namespace that shares this /tmp and this
Docker engine must never be taken for dead because its pid is not visible here. So proof of life is
positive:

- every process that owns sandboxes keeps ONE owner lease (not one per sandbox): the file
  `envhub-owner-<key>.lease` in the temp directory where local scratch areas live (and in the fleet's
  lease directory when it has one), touched by a thread every `heartbeat_s`. Its mtime is the last beat;
  its content the owner's identity: host, boot id, PID namespace, pid, the process's start time, and the
  `ttl_s` it promises to beat within;
- every sandbox names its owner: the scratch area's name (`envhub-sandbox-<pid>-<key>-*`), Docker labels
  and E2B metadata (`OWNER_MARKS`), the fleet's per-sandbox lease.

`judge` is the one rule every reaper (`envhub fleet reap`, a fleet's sweep at start, the local backend's
sweep of stale scratch areas) applies; docs/sandboxes.md says it with the threat each part covers.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import socket
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

log = logging.getLogger(__name__)

LEASE_PREFIX = "envhub-owner-"
LEASE_SUFFIX = ".lease"
NO_LEASE_GRACE_S = 24 * 3600.0
"""A sandbox whose owner has no lease this reaper can see (made by an envhub from before owner leases,
or its owner's lease lives in a /tmp this reaper does not share) is reaped only when it is older than
this AND its owner's pid runs nowhere this reaper can see: a pid from another namespace proves nothing."""
STALE_LEASE_KEEP_S = 3600.0
"""An owner lease that stopped beating this long ago is removed by the sweep (its sandboxes went when it
expired); a live owner whose lease was removed writes it again at its next beat."""
MAX_LEASE_BYTES = 4096

MARK_PID = "envhub.owner"
MARK_HOST = "envhub.host"
MARK_KEY = "envhub.owner.key"
MARK_BOOT = "envhub.owner.boot"
MARK_PID_NS = "envhub.owner.pidns"
MARK_STARTED = "envhub.owner.started"


class Owner(BaseModel):
    """A process that owns sandboxes, named so that no other process anywhere can be taken for it."""

    model_config = ConfigDict(frozen=True)

    key: str
    """A random token: names the owner's lease file, and is what every sandbox of the owner carries."""
    host: str
    boot_id: str
    """/proc/sys/kernel/random/boot_id: a pid and a start time mean nothing across reboots."""
    pid_ns: str
    """readlink /proc/self/ns/pid: a pid means nothing outside its namespace."""
    pid: int
    started: int | None
    """Clock ticks since boot when the process started: tells it from a later process given its pid."""

    def marks(self) -> dict[str, str]:
        """The owner as Docker labels / E2B metadata (`envhub.owner` stays the pid, as before)."""
        return {
            MARK_PID: str(self.pid),
            MARK_HOST: self.host,
            MARK_KEY: self.key,
            MARK_BOOT: self.boot_id,
            MARK_PID_NS: self.pid_ns,
            MARK_STARTED: "" if self.started is None else str(self.started),
        }

    @classmethod
    def from_marks(cls, marks: Mapping[str, str]) -> Owner | None:
        """The owner a sandbox's labels or metadata name; None for an older envhub's (pid and host only)."""
        try:
            started = marks.get(MARK_STARTED, "")
            return cls(
                key=marks[MARK_KEY],
                host=marks[MARK_HOST],
                boot_id=marks[MARK_BOOT],
                pid_ns=marks[MARK_PID_NS],
                pid=int(marks[MARK_PID]),
                started=int(started) if started else None,
            )
        except (KeyError, ValueError, ValidationError):
            return None


class OwnerLease(BaseModel):
    """What an owner lease file holds: who, and how long after its last beat it may be taken for dead."""

    model_config = ConfigDict(frozen=True)

    owner: Owner
    ttl_s: float


# -- this process -------------------------------------------------------------------------------------


def process_start(pid: int) -> int | None:
    """When a process started (clock ticks since boot), or None if it is gone (from /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(text.rsplit(")", 1)[1].split()[19])


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


@functools.cache
def _boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


@functools.cache
def _pid_ns_of(pid: int) -> str:
    """Cached per pid: a process does not change PID namespace (a fork's child is asked anew)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _pid_ns() -> str:
    return _pid_ns_of(os.getpid())


def proc_shows_our_namespace() -> bool:
    """Whether /proc is our PID namespace's: with another's (`unshare --pid` without --mount-proc, a
    container given the host's /proc), /proc/<pid> names some other process, and no pid can be checked."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def owner_alive(pid: int, started: int | None = None) -> bool:
    """Whether process `pid` runs in the /proc this process sees, and is the one that started at `started`."""
    now = process_start(pid)
    return now is not None and (started is None or now == started)


def same_namespace(owner: Owner) -> bool:
    """Whether `owner`'s pid can be checked here: same host, boot and PID namespace, and a /proc of ours.
    Only then may a reaper judge it dead by its pid and start time rather than by its lease's age."""
    return (
        bool(owner.boot_id and owner.pid_ns)
        and owner.host == socket.gethostname()
        and owner.boot_id == _boot_id()
        and owner.pid_ns == _pid_ns()
        and proc_shows_our_namespace()
    )


class _Heartbeat:
    """This process's owner lease and the thread that beats it (a busy event loop must not starve it).

    One per process: a fork's child has another pid and start time, so it makes its own (see `me`).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.owner = Owner(
            key=uuid.uuid4().hex,
            host=socket.gethostname(),
            boot_id=_boot_id(),
            pid_ns=_pid_ns(),
            pid=self.pid,
            started=process_start(self.pid),
        )
        self.ttl_s, self.interval_s = _settings()
        self._dirs: dict[Path, int | None] = {}
        """Where the lease is kept, and the descriptor of the file written there (None: not yet)."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def keep_in(
        self, directory: Path, *, ttl_s: float | None = None, interval_s: float | None = None
    ) -> None:
        """Keep the lease in `directory` too, and beat at least every `interval_s`; the ttl written is the
        longest any user of this process asked for (a shorter one could call a live owner dead)."""
        with self._lock:
            if ttl_s is not None and ttl_s > self.ttl_s:
                self.ttl_s = ttl_s
                for d in self._dirs:
                    self._dirs[d] = self._write(d, self._dirs[d])
            if interval_s is not None and interval_s < self.interval_s:
                self.interval_s = interval_s
                self._wake.set()
            if directory not in self._dirs:
                self._dirs[directory] = self._write(directory, None)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="envhub-owner-heartbeat", daemon=True)
                self._thread.start()
                atexit.register(self.end)

    def forget(self, directory: Path) -> None:
        """Stop keeping the lease in `directory` (a fleet closed); the temp dir's stays while we run."""
        with self._lock:
            if directory == _tmp() or directory not in self._dirs:
                return
            self._close(self._dirs.pop(directory), directory)

    def beat(self) -> None:
        """Touch every copy of the lease (its mtime is the beat); write again one that someone removed."""
        with self._lock:
            for directory, fd in list(self._dirs.items()):
                try:
                    if fd is not None and os.fstat(fd).st_nlink:
                        os.utime(fd)
                    elif directory.is_dir():
                        self._dirs[directory] = self._write(directory, fd, make_dir=False)
                    elif directory != _tmp():  # a lease directory someone removed: not made again
                        self._close(self._dirs.pop(directory), directory)
                except OSError as exc:  # a full or vanished disk: the next beat tries again
                    log.warning("could not renew the owner lease in %s: %s", directory, exc)

    def end(self) -> None:
        """At exit: the lease goes with the process (what it leaves open is then judged without one)."""
        if os.getpid() != self.pid:
            return
        with self._lock:
            for directory, fd in self._dirs.items():
                self._close(fd, directory)
            self._dirs.clear()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            self.beat()

    def _write(self, directory: Path, old: int | None, *, make_dir: bool = True) -> int | None:
        """Write the lease file afresh (O_EXCL, never through a link: /tmp is shared with others)."""
        if old is not None:
            with contextlib.suppress(OSError):
                os.close(old)
        path = directory / lease_name(self.owner.key)
        data = OwnerLease(owner=self.owner, ttl_s=self.ttl_s).model_dump_json().encode()
        try:
            if make_dir:
                directory.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISREG(os.lstat(path).st_mode) and os.lstat(path).st_uid == os.geteuid():
                    os.unlink(path)  # our own earlier copy (a ttl raised): replaced whole
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            os.write(fd, data)
            return fd
        except OSError as exc:
            log.warning("could not write the owner lease %s: %s", path, exc)
            return None

    def _close(self, fd: int | None, directory: Path) -> None:
        if fd is None:
            return
        with contextlib.suppress(OSError):
            if os.fstat(fd).st_nlink:
                os.unlink(directory / lease_name(self.owner.key))
        with contextlib.suppress(OSError):
            os.close(fd)


_heartbeat: _Heartbeat | None = None
_heartbeat_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A fork's child is another owner (another pid, start time), and a lock another thread held at the
    fork would stay held in it forever: both start afresh."""
    global _heartbeat, _heartbeat_lock
    _heartbeat, _heartbeat_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def me(
    *, directory: Path | None = None, ttl_s: float | None = None, interval_s: float | None = None
) -> Owner:
    """This process's identity, its lease written (in the temp dir, and `directory` too) and beating."""
    global _heartbeat
    with _heartbeat_lock:
        if _heartbeat is None or _heartbeat.pid != os.getpid():
            _heartbeat = _Heartbeat()
        heartbeat = _heartbeat
    heartbeat.keep_in(_tmp())
    if directory is not None or ttl_s is not None or interval_s is not None:
        heartbeat.keep_in(directory or _tmp(), ttl_s=ttl_s, interval_s=interval_s)
    return heartbeat.owner


def forget(directory: Path) -> None:
    """Stop keeping this process's lease in `directory`."""
    if _heartbeat is not None and _heartbeat.pid == os.getpid():
        _heartbeat.forget(directory)


def _settings() -> tuple[float, float]:
    """The lease's ttl and the beat's interval: the fleet's (ENVHUB_FLEET's lease_ttl_s, heartbeat_s)."""
    from envhub.sandbox.fleet.config import FleetConfig

    config = FleetConfig.from_env()
    return config.lease_ttl_s, config.heartbeat_s


def _tmp() -> Path:
    return Path(tempfile.gettempdir())


# -- judging an owner ---------------------------------------------------------------------------------


def lease_name(key: str) -> str:
    return f"{LEASE_PREFIX}{key}{LEASE_SUFFIX}"


@dataclass(frozen=True)
class Found:
    """An owner lease as read from a directory: what it says, and its last beat (the file's mtime)."""

    lease: OwnerLease
    beat_at: float
    path: Path


def read_lease(directory: Path, key: str) -> Found | None:
    """The owner lease `key` in `directory`, if there is one (a regular file that parses)."""
    if not key.isalnum():
        return None
    path = directory / lease_name(key)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        lease = OwnerLease.model_validate_json(os.read(fd, MAX_LEASE_BYTES))
    except (OSError, ValidationError):
        return None
    finally:
        os.close(fd)
    if lease.owner.key != key:
        return None
    return Found(lease, st.st_mtime, path)


def find_lease(key: str, directories: Iterable[Path]) -> Found | None:
    """The freshest copy of owner `key`'s lease among `directories` (the temp dir always among them)."""
    found = [f for d in dict.fromkeys([_tmp(), *directories]) if (f := read_lease(d, key)) is not None]
    return max(found, key=lambda f: f.beat_at, default=None)


@dataclass(frozen=True)
class Verdict:
    """Whether a sandbox's owner is dead: `dead` with `why`, alive (`dead` False), or `unknown` when there
    is no proof either way (no lease this reaper can see, and a pid it cannot check)."""

    dead: bool
    why: str = ""
    unknown: bool = False


ALIVE = Verdict(dead=False)
UNKNOWN = Verdict(dead=False, unknown=True)


def judge(
    key: str | None,
    claimed: Owner | None = None,
    *,
    directories: Iterable[Path] = (),
    now: float | None = None,
) -> Verdict:
    """The rule. `key` is the owner a sandbox names; `claimed` the identity it carries (labels, a fleet
    lease), if any.

    1. An owner in this reaper's own host, boot and PID namespace (with a /proc of that namespace) is
       judged by its pid and start time: dead as soon as that process is gone, alive while it runs, even
       with a late lease (a busy owner is not a dead one).
    2. Otherwise its lease decides, by age alone: alive while it beat within its ttl, dead after.
    3. No lease to be seen and no pid that can be checked: UNKNOWN (the caller's no-lease rule).
    """
    found = find_lease(key, directories) if key else None
    owner = claimed
    if found is not None:
        if claimed is not None and claimed != found.lease.owner:
            found = None  # a lease that names someone else is no proof of this owner's life
        else:
            owner = found.lease.owner
    if owner is not None and same_namespace(owner):
        if owner_alive(owner.pid, owner.started):
            return ALIVE
        return Verdict(dead=True, why=f"its owner (pid {owner.pid}) is dead")
    if found is None:
        return UNKNOWN
    age = (time.time() if now is None else now) - found.beat_at
    if age < found.lease.ttl_s:
        return ALIVE
    return Verdict(dead=True, why=f"its owner's lease {key} had no heartbeat for {age:.0f} s")


def judge_without_lease(
    pid: str | None, host: str | None, made_at: float | None, now: float | None = None
) -> Verdict:
    """The rule for a sandbox whose owner has no lease to be seen (an older envhub's, or one from a /tmp
    this reaper does not share): dead only when it is older than NO_LEASE_GRACE_S, its host mark is
    this host's (or absent), and its pid runs nowhere this reaper can see. A young sandbox of an owner in
    another PID namespace is never taken for an orphan; an old one of a live owner there may be."""
    if pid is None or not pid.isdigit() or made_at is None or host not in (None, "", socket.gethostname()):
        return UNKNOWN
    age = (time.time() if now is None else now) - made_at
    if age < NO_LEASE_GRACE_S or owner_alive(int(pid)):
        return UNKNOWN
    why = f"its owner (pid {pid}) has no lease and does not run here, and it was made {age / 3600:.0f} h ago"
    return Verdict(dead=True, why=why)


def sweep_stale_leases(
    directory: Path | None = None,
    now: float | None = None,
    *,
    in_use: Callable[[str], bool] = lambda key: False,
) -> None:
    """Remove owner leases (of our uid, or any as root) whose owner is gone: one of this namespace whose
    process is dead, or any that stopped beating STALE_LEASE_KEEP_S ago (its sandboxes were orphans from
    the moment it expired; what is left of them falls to the no-lease rule).

    A lease `in_use(key)` says a sandbox still names is kept: a scratch area's name carries only its
    owner's pid and key, so the lease is what proves that owner dead to the next reaper. Removed first,
    it would leave the area to the day-old rule (another process's sweep raced a reap this way)."""
    directory = directory or _tmp()
    now = time.time() if now is None else now
    for path in directory.glob(f"{LEASE_PREFIX}*{LEASE_SUFFIX}"):
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if not stat.S_ISREG(st.st_mode) or (os.geteuid() != 0 and st.st_uid != os.geteuid()):
                continue
            key = path.name.removeprefix(LEASE_PREFIX).removesuffix(LEASE_SUFFIX)
            found = read_lease(directory, key)
            if found is not None and same_namespace(found.lease.owner):
                gone = not owner_alive(found.lease.owner.pid, found.lease.owner.started)
            else:
                gone = now - st.st_mtime > (found.lease.ttl_s if found else 0.0) + STALE_LEASE_KEEP_S
            if gone and not in_use(key):
                os.unlink(path)
