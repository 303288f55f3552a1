"""The orphan reaper: finds the sandboxes a killed process left behind, and removes them.

An owner that exits normally closes its sandboxes; one killed with SIGKILL leaves them running: a
local scratch area (a tmpfs, as root) and processes in its slot's cgroups, a Docker container, an E2B
sandbox billed until it expires. Every sandbox names its owner (envhub.sandbox.owner): the scratch
area's name, the container's labels, the E2B sandbox's metadata, the fleet's lease. Whether that owner
is dead is decided by one rule, `owner.judge`, never by a pid this process cannot see:

- an owner in this reaper's own host, boot and PID namespace is judged by its pid and start time (dead
  as soon as it is gone; a live one keeps its sandboxes, even with a late heartbeat);
- any other owner by its owner lease's age alone: alive while it beat within its ttl;
- a sandbox whose owner has no lease in sight (an older envhub's) by `owner.judge_without_lease`: only
  once it is a day old and its pid runs nowhere this reaper can see.

Sandboxes are found two ways: by the fleet's leases (envhub.sandbox.fleet.leases; a lease whose
owner died while its sandbox was being made names none, and only its file goes), and by the owner marks,
for sandboxes opened without the fleet.

Slots (a uid and its cgroups) are not removed but emptied: a slot whose lock nobody holds has no owner,
so whatever still runs in its cgroups is killed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envhub.sandbox import owner as ownership
from envhub.sandbox.docker import HOST_LABEL, LABEL, OWNER_LABEL
from envhub.sandbox.fleet.leases import LeaseBook

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
        why = book.why_orphaned(lease) if book is not None else None
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
    directories = (book.directory,) if book is not None else ()
    scans = {"local": _local_orphans, "docker": _docker_orphans, "e2b": _e2b_orphans}
    for provider in providers:
        for orphan in scans[provider](directories):
            key = (orphan.provider, orphan.ref)
            if key not in found and key not in held:
                found[key] = orphan
    return [o for o in found.values() if owners is None or o.owner_pid in owners]


def reap(orphans: list[Orphan], book: LeaseBook | None = None) -> dict[Orphan, str | None]:
    """Remove each orphan (and its lease): None for each removed, else why it could not be. Then the
    owner leases of dead owners go (envhub.sandbox.owner.sweep_stale_leases)."""
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
    from envhub.sandbox.scratch import names_owner

    for directory in [None, book.directory] if book is not None else [None]:
        with contextlib.suppress(OSError):  # the owner leases of dead owners: best effort, as above
            ownership.sweep_stale_leases(directory, in_use=names_owner)
    return results


def _nothing_to_remove(orphan: Orphan) -> None:
    """A pending lease names no sandbox: removing its lease file is all there is."""


def _why_dead(marks: Mapping[str, str], made_at: float | None, directories: tuple[Path, ...]) -> str | None:
    """Why the owner a container's labels (or an E2B sandbox's metadata) name is dead, or None."""
    claimed = ownership.Owner.from_marks(marks)
    verdict = ownership.judge(claimed.key if claimed else None, claimed, directories=directories)
    if verdict.unknown:
        verdict = ownership.judge_without_lease(marks.get(OWNER_LABEL), marks.get(HOST_LABEL), made_at)
    return verdict.why if verdict.dead else None


def _pid(mark: str | None) -> int | None:
    return int(mark) if mark is not None and mark.isdigit() else None


# -- local: scratch areas and slots ------------------------------------------------------------------


def _local_orphans(directories: tuple[Path, ...]) -> Iterator[Orphan]:
    from envhub.sandbox.scratch import scratch_owner, stale_scratch_areas

    for path, why in stale_scratch_areas():
        yield Orphan("local", "scratch", str(path), _pid(scratch_owner(path)[0]), why)
    for index, pids in _unowned_slots():
        yield Orphan(
            "local", "slot", str(index), None, f"slot {index} is free, yet {len(pids)} process(es) run in it"
        )


def _unowned_slots() -> Iterator[tuple[int, list[int]]]:
    """Slots whose lock nobody holds but whose cgroups still hold processes."""
    from envhub.sandbox.slots import CGROUP_NAME, cgroup_pids
    from envhub.settings import settings

    for procs in sorted((settings().cgroup_root / "pids" / CGROUP_NAME).glob("slot*/cgroup.procs")):
        index = procs.parent.name.removeprefix("slot")
        with contextlib.suppress(OSError, ValueError):
            pids = cgroup_pids(procs)
            if pids and index.isdigit():
                with _slot_lock(int(index)) as free:
                    if free:
                        yield int(index), pids


@contextlib.contextmanager
def _slot_lock(index: int) -> Iterator[bool]:
    """Holds slot `index`'s lock if nobody does (True), so no sandbox takes the slot meanwhile."""
    from envhub.settings import settings

    try:
        fd = os.open(settings().sandbox_lock_dir / f"slot{index}.lock", os.O_RDWR | os.O_CLOEXEC)
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
    from envhub.sandbox.slots import CGROUP_NAME, sigkill_cgroup
    from envhub.settings import settings

    procs = settings().cgroup_root / "pids" / CGROUP_NAME / f"slot{orphan.ref}" / "cgroup.procs"
    with _slot_lock(int(orphan.ref)) as free:
        if not free:
            return  # a sandbox took the slot since: it kills the leftovers itself
        deadline = time.monotonic() + KILL_DEADLINE_S
        while pids := sigkill_cgroup(procs):
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {pids} in slot {orphan.ref} survived SIGKILL")
            time.sleep(0.01)


# -- docker: labelled containers ------------------------------------------------------------------


def _docker_client(engine: str | None) -> Any:
    import docker

    return docker.DockerClient(base_url=engine, timeout=30) if engine else docker.from_env(timeout=30)


def _docker_orphans(directories: tuple[Path, ...]) -> Iterator[Orphan]:
    try:
        client = _docker_client(None)
    except Exception:  # no SDK or no engine here: nothing of it to reap
        return
    engine = os.environ.get("DOCKER_HOST")
    try:
        # The list endpoint alone (labels and creation time): no inspect per container, which another
        # run's container going meanwhile would turn into a 404 that ends the whole scan.
        listed = client.api.containers(all=True, filters={"label": f"{LABEL}=1"})
    except Exception:
        client.close()
        return
    try:
        for c in listed:
            labels = c.get("Labels") or {}
            if (why := _why_dead(labels, c.get("Created"), directories)) is not None:
                yield Orphan("docker", "container", c["Id"], _pid(labels.get(OWNER_LABEL)), why, engine)
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


def _e2b_orphans(directories: tuple[Path, ...]) -> Iterator[Orphan]:
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
        # No creation time given: the no-lease rule never reaps an E2B sandbox (it ends at its own
        # timeout); only its named owner's death, or that owner's expired lease, does.
        if (why := _why_dead(meta, None, directories)) is not None:
            yield Orphan("e2b", "sandbox", info.sandbox_id, _pid(meta.get(OWNER_LABEL)), why)


def _kill_e2b(orphan: Orphan) -> None:
    from e2b import Sandbox

    Sandbox.kill(orphan.ref)  # the class-level variant: kill by id
