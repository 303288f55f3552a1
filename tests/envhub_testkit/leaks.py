"""What this process's sandboxes left behind: the leak check of the sandbox suites, for every suite here.

Only this process's own: other envhub users on the same host (another test run, a rollout job) have
sandboxes, slots and scratch areas of their own, which come and go while a test runs.
"""

from __future__ import annotations

import glob
import os
import tempfile
from pathlib import Path

from envhub.sandbox.scratch import SCRATCH_PREFIX
from envhub.sandbox.slots import CGROUP_NAME
from envhub.settings import settings


def descendants() -> set[int]:
    """This process's descendants. Whatever its sandboxes leave running stays below it: it is the child
    subreaper of their orphans (see `envhub.sandbox.libc.become_subreaper`)."""
    children: dict[int, list[int]] = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            ppid = int(Path(stat).read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone while we looked
        children.setdefault(ppid, []).append(int(Path(stat).parent.name))
    found: set[int] = set()
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def sandbox_footprint() -> dict[str, object]:
    """What this process's sandboxes may leave behind: scratch dirs, mounts, processes of slot uids or in
    slot cgroups.

    Only this process's own: other envhub users on the same host (another test run, a rollout job) have
    sandboxes, slots and scratch areas of their own, which come and go while a test runs. Scratch dirs
    are named after their owner's pid, and leftover processes stay below their owner.
    """
    mine = f"{SCRATCH_PREFIX}{os.getpid()}-"
    scratch = sorted(glob.glob(os.path.join(tempfile.gettempdir(), f"{mine}*")))
    below = descendants()
    config = settings()
    slot_procs = []
    for pid in sorted(below):
        try:
            uid = Path(f"/proc/{pid}").stat().st_uid
        except FileNotFoundError:
            continue
        if config.sandbox_uid_base <= uid < config.sandbox_uid_base + config.sandbox_max_slots:
            slot_procs.append(pid)
    in_cgroups = []
    for procs in glob.glob(str(config.cgroup_root / "pids" / CGROUP_NAME / "slot*" / "cgroup.procs")):
        in_cgroups += [pid for pid in Path(procs).read_text().split() if int(pid) in below]
    mounts = [line for line in Path("/proc/self/mounts").read_text().splitlines() if mine in line]
    return {"scratch": scratch, "slot_procs": slot_procs, "cgroup_procs": in_cgroups, "mounts": mounts}


def reap_adopted_zombies() -> list[int]:
    """Reap the dead sandbox processes this process adopted from a child that was killed.

    A process that opened a local sandbox is a child subreaper (`envhub.sandbox.libc.become_subreaper`),
    and envhub reaps exactly the inits its own sandboxes report. When a test kills a child that had
    sandboxes of its own (a Ray node, an owner process), that child's sandbox processes are orphaned to
    this process, where they stay as zombies no one waits for: not leaks of a later test, but left here
    they would read as one in its footprint. The test that killed their parent reaps them."""
    reaped = []
    config = settings()
    for pid in descendants():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            uid = Path(f"/proc/{pid}").stat().st_uid
        except FileNotFoundError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, ppid = fields[0], int(fields[1])
        in_slot = config.sandbox_uid_base <= uid < config.sandbox_uid_base + config.sandbox_max_slots
        if state == "Z" and ppid == os.getpid() and in_slot:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    reaped.append(pid)
            except ChildProcessError:
                continue
    return reaped
