"""Slot claims: lowest free index first across processes, without re-trying the process's own claims, a
slot's cgroups made again when one was removed while the process ran, and a dead owner's slot emptied."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envhub.sandbox import slots
from envhub.sandbox.fleet.reaper import find_orphans, reap
from envhub.sandbox.slots import SlotPool, cgroups_available
from envhub.settings import settings


@pytest.fixture
def private_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVHUB_SANDBOX_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("ENVHUB_CGROUP_ROOT", str(tmp_path / "no-cgroups"))
    monkeypatch.setenv("ENVHUB_SANDBOX_MAX_SLOTS", "64")
    return tmp_path / "locks"


@pytest.fixture
def own_cgroups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """One slot, its lock private and its cgroups under a name of this test's own, removed afterwards:
    other suites' slots stay untouched. The name is yielded."""
    monkeypatch.setenv("ENVHUB_SANDBOX_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("ENVHUB_SANDBOX_MAX_SLOTS", "1")
    own = f"envhub-test-{os.getpid()}"
    monkeypatch.setattr(slots, "CGROUP_NAME", own)
    yield own
    for controller in slots.CONTROLLERS:
        folder = settings().cgroup_root / controller / own
        for made in [*folder.glob("slot*"), folder]:
            with contextlib.suppress(OSError):  # cpu and cpuacct may be one hierarchy: gone already
                os.rmdir(made)


def test_a_claim_opens_no_lock_the_process_already_holds(
    private_locks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At concurrency 32 an open tried its own ~40 held locks before a free one: a fifth of the host's CPU
    per open. Held ones are skipped; a released one is the next handed out (lowest first)."""
    pool = SlotPool()
    held = [pool.acquire() for _ in range(40)]
    opened: list[str] = []
    real_open = os.open

    def counting(path: str | os.PathLike[str], *args: object, **kwargs: object) -> int:
        opened.append(str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting)
    try:
        slot = pool.acquire()
        assert slot.index == 40
        assert opened == [str(private_locks / "slot40.lock")]
        pool.release(held[7])
        again = pool.acquire()
        assert again.index == 7
    finally:
        monkeypatch.undo()
        for s in [*held[:7], *held[8:], slot, again]:
            pool.release(s)


def test_a_slot_another_process_holds_is_passed_over(private_locks: Path) -> None:
    """The skip is per process: a lock held elsewhere still fails its flock and is passed over."""
    pool = SlotPool()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from envhub.sandbox.slots import SlotPool; s = SlotPool().acquire(); print(s.index, flush=True);"
            " import sys; sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "0"
        slot = pool.acquire()
        assert slot.index == 1
        pool.release(slot)
    finally:
        holder.communicate("", timeout=30)


@pytest.mark.skipif(not cgroups_available(), reason="needs root and cgroup v1 (memory, pids, cpu, cpuacct)")
def test_a_slots_cgroups_removed_while_the_process_runs_are_made_again(own_cgroups: str) -> None:
    """The pool makes a slot's cgroups once per process; one removed since (an operator's clean-up) is
    made again on the next claim, owned for the join by the slot's uid."""
    pool = SlotPool()
    slot = pool.acquire()
    pool.release(slot)
    gone = slot.cgroups["pids"]
    assert gone.parent.name == own_cgroups
    os.rmdir(gone)
    slot = pool.acquire()
    assert slot.cgroups["pids"].is_dir()
    assert (slot.cgroups["pids"] / "cgroup.procs").stat().st_uid == slot.uid
    pool.release(slot)


@pytest.mark.skipif(not cgroups_available(), reason="needs root and cgroup v1 (memory, pids, cpu, cpuacct)")
def test_the_reaper_kills_what_a_dead_owner_left_running_in_its_slot(own_cgroups: str) -> None:
    """An owner killed outright frees its slot's lock and leaves its processes running in the slot's
    cgroup. The reaper finds the slot by what the cgroup holds, not by any name, and kills it all."""
    pool = SlotPool()
    slot = pool.acquire()
    left = [subprocess.Popen(["sleep", "600"]) for _ in range(3)]
    try:
        for proc in left:
            (slot.cgroups["pids"] / "cgroup.procs").write_text(str(proc.pid))
        assert sorted(slot.pids()) == sorted(p.pid for p in left)
        pool.release(slot)  # the owner is gone: its lock went with it, its processes did not
        orphans = [o for o in find_orphans(None, providers=("local",)) if o.kind == "slot"]
        assert [o.ref for o in orphans] == [str(slot.index)]
        assert reap(orphans) == {orphans[0]: None}
        assert [p.wait(timeout=10) for p in left] == [-signal.SIGKILL] * len(left)
        assert slot.pids() == []
    finally:
        for proc in left:
            proc.kill()
            proc.wait()
