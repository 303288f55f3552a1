"""The orphan reaper: finds the sandboxes a killed process left behind, and removes them.

An owner that exits normally closes its sandboxes; one killed with SIGKILL leaves them running: a
local scratch area (a tmpfs, as root) and processes in its slot's cgroups, a Docker container, an E2B
sandbox billed until it expires. They are found two ways:

- by lease (envhub.sandbox.fleet.leases): a lease whose owner is dead (on this host), or that expired
  with no heartbeat (an owner on another host), names its sandbox. A lease of a live owner on this host
  is never reclaimed, even when late: a busy owner is not a dead one;
- by the owner marks every backend already leaves, for sandboxes opened without the fleet: local scratch
  areas are named `envhub-sandbox-<pid>-*`, Docker containers and E2B sandboxes carry the labels (or
  metadata) `envhub.sandbox=1`, `envhub.owner=<pid>` and `envhub.host=<host>`. Only this host's dead
  owners are reaped this way; pids of other hosts mean nothing here.

Slots (a uid and its cgroups) are not removed but emptied: a slot whose lock nobody holds has no owner,
so whatever still runs in its cgroups is killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import tempfile
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.sandbox.docker import HOST_LABEL, LABEL, OWNER_LABEL
from envhub.sandbox.fleet.leases import LeaseBook, owner_alive

PROVIDERS = ("local", "docker", "e2b")
KILL_DEADLINE_S = 10.0


@dataclass(frozen=True)
class Orphan:
    """A sandbox (or a slot's leftover processes) nobody will close."""

    provider: str
    kind: str
    """scratch, slot, container or sandbox."""
    ref: str
    owner_pid: int | None
    why: str
    engine: str | None = None
    lease_id: str | None = None


def find_orphans(
    book: LeaseBook | None,
    *,
    providers: Collection[str] = PROVIDERS,
    owners: Collection[int] | None = None,
) -> list[Orphan]:
    """Every orphan of `providers`, from the leases in `book` and the owner marks; `owners` limits them to
    those pids' (a test, or a user who knows which run died), leaving out slots, whose owner is unknown."""
    found: dict[tuple[str, str], Orphan] = {}
    held: set[tuple[str, str]] = set()
    for lease in book.leases() if book is not None else []:
        if lease.provider not in providers:
            continue
        why = lease.why_orphaned(book.now() if book is not None else time.time())
        if why is None:
            held.add((lease.provider, lease.ref))
            continue
        # A pending lease's owner died while making the sandbox: only the lease itself is left to remove
        # (a sandbox it made before dying carries the owner marks, and the scans below find it).
        kind = {"local": "scratch", "docker": "container"}.get(lease.provider, "sandbox")
        found[(lease.provider, lease.ref or lease.lease_id)] = Orphan(
            lease.provider,
            kind if lease.ref else "pending",
            lease.ref,
            lease.owner_pid,
            why,
            lease.engine,
            lease.lease_id,
        )
    scans = {"local": _local_orphans, "docker": _docker_orphans, "e2b": _e2b_orphans}
    for provider in providers:
        for orphan in scans[provider]():
            key = (orphan.provider, orphan.ref)
            if key not in found and key not in held:
                found[key] = orphan
    return [o for o in found.values() if owners is None or o.owner_pid in owners]


def reap(orphans: list[Orphan], book: LeaseBook | None = None) -> dict[Orphan, str | None]:
    """Remove each orphan (and its lease): None for each removed, else why it could not be."""
    removers = {
        "scratch": _remove_scratch,
        "slot": _empty_slot,
        "container": _remove_container,
        "pending": _nothing_to_remove,
    }
    results: dict[Orphan, str | None] = {}
    for orphan in orphans:
        try:
            removers.get(orphan.kind, _kill_e2b)(orphan)
        except Exception as exc:  # one orphan's failure must not stop the others' removal
            results[orphan] = f"{type(exc).__name__}: {exc}"
            continue
        if book is not None and orphan.lease_id is not None:
            book.remove(orphan.lease_id)
        results[orphan] = None
    return results


def _nothing_to_remove(orphan: Orphan) -> None:
    """A pending lease names no sandbox: removing its lease file is all there is."""


def _dead_owner(owner: str | None, host: str | None) -> int | None:
    """The pid an owner mark names, when it is a dead process of this host (no host mark: this host's
    own engine); else None."""
    if host not in (None, "", socket.gethostname()) or owner is None or not owner.isdigit():
        return None
    return None if owner_alive(int(owner)) else int(owner)


# -- local: scratch areas and slots ------------------------------------------------------------------


def _local_orphans() -> Iterator[Orphan]:
    from envhub.sandbox.scratch import SCRATCH_PREFIX

    for path in sorted(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*-*")):
        owner = path.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        if (pid := _dead_owner(owner, None)) is not None:
            yield Orphan("local", "scratch", str(path), pid, f"its owner (pid {owner}) is dead")
    for index, pids in _unowned_slots():
        yield Orphan(
            "local", "slot", str(index), None, f"slot {index} is free, yet {len(pids)} process(es) run in it"
        )


def _unowned_slots() -> Iterator[tuple[int, list[int]]]:
    """Slots whose lock nobody holds but whose cgroups still hold processes."""
    from envhub.sandbox.slots import CGROUP_NAME, CGROUP_ROOT

    for procs in sorted((CGROUP_ROOT / "pids" / CGROUP_NAME).glob("slot*/cgroup.procs")):
        index = procs.parent.name.removeprefix("slot")
        with contextlib.suppress(OSError, ValueError):
            pids = [int(p) for p in procs.read_text().split()]
            if pids and index.isdigit():
                with _slot_lock(int(index)) as free:
                    if free:
                        yield int(index), pids


@contextlib.contextmanager
def _slot_lock(index: int) -> Iterator[bool]:
    """Holds slot `index`'s lock if nobody does (True), so no sandbox takes the slot meanwhile."""
    from envhub.sandbox.slots import LOCK_DIR

    try:
        fd = os.open(LOCK_DIR / f"slot{index}.lock", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _remove_scratch(orphan: Orphan) -> None:
    from envhub.sandbox.scratch import SCRATCH_PREFIX, remove_scratch

    path = Path(orphan.ref)
    if not path.name.startswith(SCRATCH_PREFIX):  # a lease file is data: never remove what it names blindly
        raise ValueError(f"{path} is not a sandbox scratch area")
    remove_scratch(path)


def _empty_slot(orphan: Orphan) -> None:
    from envhub.sandbox.slots import CGROUP_NAME, CGROUP_ROOT

    procs = CGROUP_ROOT / "pids" / CGROUP_NAME / f"slot{orphan.ref}" / "cgroup.procs"
    with _slot_lock(int(orphan.ref)) as free:
        if not free:
            return  # a sandbox took the slot since: it kills the leftovers itself
        deadline = time.monotonic() + KILL_DEADLINE_S
        while pids := [int(p) for p in procs.read_text().split()]:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {pids} in slot {orphan.ref} survived SIGKILL")
            time.sleep(0.01)


# -- docker: labelled containers ------------------------------------------------------------------


def _docker_client(engine: str | None) -> Any:
    import docker

    return docker.DockerClient(base_url=engine, timeout=30) if engine else docker.from_env(timeout=30)


def _docker_orphans() -> Iterator[Orphan]:
    try:
        client = _docker_client(None)
        containers = client.containers.list(all=True, filters={"label": f"{LABEL}=1"})
    except Exception:  # no SDK or no engine here: nothing of it to reap
        return
    engine = os.environ.get("DOCKER_HOST")
    try:
        for c in containers:
            labels = c.labels or {}
            if (pid := _dead_owner(labels.get(OWNER_LABEL), labels.get(HOST_LABEL))) is not None:
                yield Orphan("docker", "container", c.id, pid, f"its owner (pid {pid}) is dead", engine)
    finally:
        client.close()


def _remove_container(orphan: Orphan) -> None:
    import docker

    client = _docker_client(orphan.engine)
    try:
        client.containers.get(orphan.ref).remove(force=True)
    except docker.errors.NotFound:
        pass  # already gone: as good as removed
    finally:
        client.close()


# -- e2b: sandboxes by metadata ---------------------------------------------------------------------


def _e2b_orphans() -> Iterator[Orphan]:
    if not os.environ.get("E2B_API_KEY"):
        return
    try:
        from e2b import Sandbox, SandboxQuery

        paginator = Sandbox.list(query=SandboxQuery(metadata={LABEL: "1"}))
        listed = []
        while paginator.has_next:
            listed += paginator.next_items()
    except Exception:  # no SDK, or E2B unreachable: nothing of it to reap now
        return
    for info in listed:
        meta = info.metadata or {}
        if (pid := _dead_owner(meta.get(OWNER_LABEL), meta.get(HOST_LABEL, "?"))) is not None:
            yield Orphan("e2b", "sandbox", info.sandbox_id, pid, f"its owner (pid {pid}) is dead")


def _kill_e2b(orphan: Orphan) -> None:
    from e2b import Sandbox

    Sandbox.kill(orphan.ref)  # the class-level variant: kill by id
