"""Leases: one small file per sandbox the fleet handed out, saying who holds it and until when.

Another process (the reaper, `envhub fleet status`) reads them: a lease whose owner is dead, or that
expired without a heartbeat, names a sandbox nobody will close. Files are written whole (a temporary
file renamed over the old one), so a reader never sees half a lease.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError


def default_lease_dir() -> Path:
    """$XDG_STATE_HOME/envhub/leases (~/.local/state/envhub/leases when unset)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "envhub" / "leases"


def process_start(pid: int) -> int | None:
    """When a process started (clock ticks since boot), or None if it is gone: with the pid, this tells
    a live owner from a later process that was given the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def owner_alive(pid: int, started: int | None = None) -> bool:
    """Whether process `pid` (of this host) still runs, and is the one that started at `started`."""
    now = process_start(pid)
    return now is not None and (started is None or now == started)


class Lease(BaseModel):
    """Who holds a sandbox and until when; `ref` is the provider's own name for it."""

    model_config = ConfigDict(frozen=True)

    lease_id: str
    provider: str
    ref: str
    """The local scratch area's path, the Docker container's id, or the E2B sandbox's id; empty while
    the sandbox is being made (a pending lease holds its place in a quota shared through the directory)."""
    engine: str | None = None
    """The Docker engine the container runs on (DOCKER_HOST when it was made; None: the default)."""
    owner_pid: int
    owner_started: int | None
    host: str
    expires_at: float
    """Unix time after which, with no heartbeat, the sandbox may be reclaimed."""

    def expired(self, now: float) -> bool:
        return now >= self.expires_at

    def why_orphaned(self, now: float) -> str | None:
        """Why this lease's sandbox is an orphan, or None while its owner may still close it: the owner
        is dead (this host), or the lease expired with no heartbeat (another host: only expiry tells).
        A live owner on this host keeps its lease even when late: a busy owner is not a dead one."""
        gone = self.owner_gone()
        if gone:
            return f"lease {self.lease_id}: its owner (pid {self.owner_pid}) is dead"
        if gone is None and self.expired(now):
            return f"lease {self.lease_id}: expired {now - self.expires_at:.0f} s ago with no heartbeat"
        return None

    def owner_gone(self) -> bool | None:
        """True when the owner is known dead; None when it runs on another host (only expiry tells)."""
        if self.host != socket.gethostname():
            return None
        return not owner_alive(self.owner_pid, self.owner_started)


class LeaseBook:
    """The lease files in one directory."""

    def __init__(self, directory: Path, ttl_s: float, *, clock: Callable[[], float] = time.time) -> None:
        self.directory, self.ttl_s, self._clock = directory, ttl_s, clock

    def grant(self, provider: str, ref: str, engine: str | None = None) -> Lease:
        pid = os.getpid()
        lease = Lease(
            lease_id=uuid.uuid4().hex,
            provider=provider,
            ref=ref,
            engine=engine,
            owner_pid=pid,
            owner_started=process_start(pid),
            host=socket.gethostname(),
            expires_at=self._clock() + self.ttl_s,
        )
        self._write(lease)
        return lease

    def record(self, lease: Lease) -> None:
        """Write a lease as it now is (a pending one, once its sandbox exists and has a ref)."""
        self._write(lease)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the directory's lock: what counting leases and granting one do as one step, across the
        processes (and, on a shared filesystem with working flock, the hosts) that use this directory."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def renew(self, lease: Lease) -> Lease | None:
        """The lease with a new expiry, written; None when its file is gone (the sandbox was reclaimed)."""
        if not self.path(lease.lease_id).exists():
            return None
        renewed = lease.model_copy(update={"expires_at": self._clock() + self.ttl_s})
        self._write(renewed)
        return renewed

    def release(self, lease: Lease) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(lease.lease_id).unlink()

    def remove(self, lease_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(lease_id).unlink()

    def leases(self) -> list[Lease]:
        """Every lease in the directory; files that are not leases are skipped."""
        found = []
        for path in sorted(self.directory.glob("*.json")):
            with contextlib.suppress(OSError, ValidationError):
                found.append(Lease.model_validate_json(path.read_bytes()))
        return found

    def path(self, lease_id: str) -> Path:
        return self.directory / f"{lease_id}.json"

    def now(self) -> float:
        return self._clock()

    def _write(self, lease: Lease) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".lease-", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(lease.model_dump_json().encode())
            os.replace(tmp, self.path(lease.lease_id))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


class Heartbeat:
    """Renews the leases this process holds, from a thread of its own: a busy event loop (or none at all,
    between `asyncio.run` calls) must not let a live owner's leases expire."""

    def __init__(self, book: LeaseBook, interval_s: float) -> None:
        self.book, self.interval_s = book, interval_s
        self._held: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Lease) -> None:
        with self._lock:
            self._held[lease.lease_id] = lease
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="envhub-fleet-heartbeat", daemon=True)
                self._thread.start()

    def update(self, lease: Lease) -> None:
        """Write a changed lease and renew that one from now on; under the lock, so a beat in between
        cannot write the old one back."""
        with self._lock:
            self.book.record(lease)
            self._held[lease.lease_id] = lease

    def drop(self, lease: Lease) -> None:
        with self._lock:
            self._held.pop(lease.lease_id, None)

    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._held.values())

    def beat(self) -> None:
        """Renew every held lease once; one the reaper took is no longer held. Under the lock, so a lease
        being dropped (and then released) is never written back after its file was removed."""
        with self._lock:
            for lease_id, lease in list(self._held.items()):
                try:
                    renewed = self.book.renew(lease)
                except OSError:  # a full or vanished disk: the next beat tries again
                    continue
                if renewed is None:
                    del self._held[lease_id]
                else:
                    self._held[lease_id] = renewed

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        """Beat until stopped, or until nothing is held (the next `hold` starts a new thread)."""
        while not self._stop.wait(self.interval_s):
            self.beat()
            with self._lock:
                if not self._held:
                    self._thread = None
                    return
