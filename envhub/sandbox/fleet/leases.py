"""Leases: one small file per sandbox the fleet handed out, saying which provider holds it and who owns it.

They are what the fleet counts against a quota shared through a directory, and what tells the reaper
which sandbox a killed owner left. Whether that owner lives is NOT theirs to say: it comes from the
owner's one lease (envhub.sandbox.owner, beaten by one thread per process, whatever the number of
sandboxes), found by the `owner` key each lease names. Files are written whole (a temporary file renamed
over the old one), so a reader never sees half a lease.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from envhub.sandbox import owner as owners
from envhub.sandbox.owner import owner_alive, process_start

__all__ = ["Heartbeat", "Lease", "LeaseBook", "default_lease_dir", "owner_alive", "process_start"]


def default_lease_dir() -> Path:
    """$XDG_STATE_HOME/envhub/leases (~/.local/state/envhub/leases when unset)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "envhub" / "leases"


class Lease(BaseModel):
    """Who holds a sandbox; `ref` is the provider's own name for it."""

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
    """When the lease was granted plus its ttl. Only a lease that names no owner lease (`owner` None:
    written by an envhub from before owner leases, whose heartbeat renewed each lease) is judged by it."""
    owner: str | None = None
    """The owner's lease key (envhub.sandbox.owner): its heartbeat is the owner's proof of life."""
    boot_id: str | None = None
    pid_ns: str | None = None

    def expired(self, now: float) -> bool:
        return now >= self.expires_at

    def claimed_owner(self) -> owners.Owner | None:
        """The owner identity this lease names, when it names one whole."""
        if self.owner is None or self.boot_id is None or self.pid_ns is None:
            return None
        return owners.Owner(
            key=self.owner,
            host=self.host,
            boot_id=self.boot_id,
            pid_ns=self.pid_ns,
            pid=self.owner_pid,
            started=self.owner_started,
        )

    def why_orphaned(self, now: float, directories: tuple[Path, ...] = ()) -> str | None:
        """Why this lease's sandbox is an orphan, or None while its owner may still close it, by the owner
        rule (envhub.sandbox.owner.judge; its lease is looked for in the temp dir and `directories`). With
        no owner lease in sight and no pid that can be checked here, the lease's own expiry decides: what
        an older envhub's renewed leases, or a lease from another host with no shared directory, allow."""
        verdict = owners.judge(self.owner, self.claimed_owner(), directories=directories)
        if verdict.dead:
            return f"lease {self.lease_id}: {verdict.why}"
        if verdict.unknown and self.expired(now):
            return f"lease {self.lease_id}: expired {now - self.expires_at:.0f} s ago with no owner lease"
        return None


class LeaseBook:
    """The lease files in one directory."""

    def __init__(self, directory: Path, ttl_s: float, *, clock: Callable[[], float] = time.time) -> None:
        self.directory, self.ttl_s, self._clock = directory, ttl_s, clock

    def grant(self, provider: str, ref: str, engine: str | None = None) -> Lease:
        """A lease of this process's, its owner lease kept in this directory too (so that a reaper on
        another host sharing the directory sees it beat)."""
        me = owners.me(directory=self.directory, ttl_s=self.ttl_s)
        lease = Lease(
            lease_id=uuid.uuid4().hex,
            provider=provider,
            ref=ref,
            engine=engine,
            owner_pid=me.pid,
            owner_started=me.started,
            host=me.host,
            expires_at=self._clock() + self.ttl_s,
            owner=me.key,
            boot_id=me.boot_id,
            pid_ns=me.pid_ns,
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

    def why_orphaned(self, lease: Lease) -> str | None:
        """`lease.why_orphaned`, its owner lease looked for in this directory too."""
        return lease.why_orphaned(self._clock(), (self.directory,))

    def renew(self, lease: Lease) -> Lease | None:
        """The lease with a new expiry, written; None when its file is gone (the sandbox was reclaimed).
        Only for leases without an owner lease: the fleet's heartbeat beats the owner lease instead."""
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
    """Keeps this process's owner lease beating (envhub.sandbox.owner: one file and one thread per
    process, however many leases it holds) in the book's directory while the fleet holds leases there,
    and tracks which leases it holds."""

    _users: ClassVar[Counter[Path]] = Counter()
    """Heartbeats of this process keeping the owner lease in each directory (two fleets may share one)."""
    _users_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, book: LeaseBook, interval_s: float) -> None:
        self.book, self.interval_s = book, interval_s
        self._held: dict[str, Lease] = {}
        self._lock = threading.Lock()
        self._using = False

    def hold(self, lease: Lease) -> None:
        owners.me(directory=self.book.directory, ttl_s=self.book.ttl_s, interval_s=self.interval_s)
        with Heartbeat._users_lock:
            if not self._using:
                self._using = True
                Heartbeat._users[self.book.directory] += 1
        with self._lock:
            self._held[lease.lease_id] = lease

    def update(self, lease: Lease) -> None:
        """Write a changed lease (a pending one, now with its sandbox's ref) and hold it."""
        with self._lock:
            self.book.record(lease)
            self._held[lease.lease_id] = lease

    def drop(self, lease: Lease) -> None:
        with self._lock:
            self._held.pop(lease.lease_id, None)

    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._held.values())

    def stop(self) -> None:
        """The fleet closed: its directory no longer needs this process's owner lease (its sandboxes'
        own closes release their leases; any left are judged by the owner lease in the temp dir)."""
        with Heartbeat._users_lock:
            if not self._using:
                return
            self._using = False
            Heartbeat._users[self.book.directory] -= 1
            if Heartbeat._users[self.book.directory] <= 0:
                del Heartbeat._users[self.book.directory]
                owners.forget(self.book.directory)
