"""Fork vs fresh reset: what a child of a mid-episode env costs next to starting that env anew.

python benchmarks/fork.py [--iterations N] [--payload-mib M] [--no-docker] [--parts sandbox,env,repl,browser]

For each backend, a sandbox holds the swe-mini stats repository (its files, as `reset` uploads them),
M MiB of random bytes (build outputs, a dataset the agent made) and the agent's edits; the table
compares, per child, the wall time and the disk of `sandbox.fork()` against a fresh sandbox with the
same repository and bytes uploaded (what `reset` pays), then at the env level `env.fork(1)` of a
swe-mini episode after two edits against `env.reset()`. Disk is the child's writable areas as `du`
counts them (local: the host's scratch directory; docker: inside the container, its tmpfs areas).

Two rows per env whose fork replays rather than copies: tool-use-v0 with a started Python REPL (its
child runs the session's cells again in a new interpreter) and web-tasks-v0 on fill-form after two
fields were filled (its child opens a new browser context and replays the fills), each `env.fork(1)`
against `env.reset()`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import envhub
import envhub.sandbox as sandbox
from envhub.messages import Message, ToolCall
from envhub.sandbox import IsolationPolicy, Sandbox

POLICY = IsolationPolicy(memory_mb=512, pids=64, disk_mb=256, wall_time_s=60, workdir="/testbed")
EDIT = 'for i in $(seq 1 50); do echo "edit $i" >> repo/notes.txt; done'


def workspace() -> Path:
    """swe-mini's stats repository at its base commit, checked out on the host (no network)."""
    from envhub_swe.data import load, select
    from envhub_swe.runtime import mini_workspace

    (instance,) = select(load("swe-mini"), instance="mini__stats-1")
    return mini_workspace(instance)


async def timed(make: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    started = time.perf_counter()
    made = await make()
    return time.perf_counter() - started, made


def disk_bytes(box: Sandbox) -> int:
    """Bytes the sandbox's writable areas hold on the host (or in the container, for docker)."""
    if box.backend == "local":
        scratch: Path = box._scratch  # type: ignore[attr-defined]
        return int(
            subprocess.run(["du", "-sb", str(scratch)], capture_output=True, text=True).stdout.split()[0]
        )
    return -1


async def docker_disk(box: Sandbox) -> int:
    result = await box.exec("du -sb /testbed /tmp /dev/shm 2>/dev/null | awk '{s+=$1} END {print s}'")
    return int(result.stdout.strip() or 0)


async def sandbox_rows(backend: str, iterations: int, repo: Path, payload: bytes) -> list[list[str]]:
    image = "envhub/swe-mini:bookworm" if backend == "docker" else None
    parent = await sandbox.open(backend, policy=POLICY, image=image)  # type: ignore[arg-type]
    rows: list[list[str]] = []
    try:
        await parent.upload_dir(repo, "/testbed/repo")
        await parent.write_file("/testbed/repo/payload.bin", payload)
        await parent.exec(EDIT)
        fork_s, fresh_s, fork_disk, fresh_disk = [], [], [], []
        for _ in range(iterations):
            seconds, child = await timed(parent.fork)
            fork_s.append(seconds)
            fork_disk.append(disk_bytes(child) if backend == "local" else await docker_disk(child))
            await child.close()

            async def fresh() -> Sandbox:
                box = await sandbox.open(backend, policy=POLICY, image=image)  # type: ignore[arg-type]
                await box.upload_dir(repo, "/testbed/repo")
                await box.write_file("/testbed/repo/payload.bin", payload)
                return box

            seconds, box = await timed(fresh)
            fresh_s.append(seconds)
            fresh_disk.append(disk_bytes(box) if backend == "local" else await docker_disk(box))
            await box.close()
        rows.append(
            [backend, f"sandbox.fork() ({len(payload) >> 20} MiB payload)", ms(fork_s), mib(fork_disk)]
        )
        fresh_what = f"open + upload repo and {len(payload) >> 20} MiB"
        rows.append([backend, fresh_what, ms(fresh_s), mib(fresh_disk)])
    finally:
        await parent.close()
    return rows


async def env_rows(runtime: str, iterations: int) -> list[list[str]]:
    env = envhub.make("swe-mini", instance="mini__stats-1", runtime=runtime)
    rows: list[list[str]] = []
    try:
        reset_s, fork_s = [], []
        for _ in range(iterations):
            seconds, _ = await timed(lambda: env.reset(seed=0))
            reset_s.append(seconds)
            for i in range(2):
                call = ToolCall.create("create", {"path": f"NOTE-{i}.md", "content": "x" * 1000}, id=f"e{i}")
                await env.step(Message(role="assistant", tool_calls=[call]))
            seconds, children = await timed(lambda: env.fork(1))
            fork_s.append(seconds)
            for child in children:
                await child.close()
        rows.append([f"swe-mini ({runtime})", "env.fork(1)", ms(fork_s), ""])
        rows.append([f"swe-mini ({runtime})", "env.reset()", ms(reset_s), ""])
    finally:
        await env.close()
    return rows


REPL_CELLS = (
    "x = 41",
    "squares = [i * i for i in range(100_000)]",
    "import json\ntext = json.dumps(squares)",
)


async def repl_rows(iterations: int) -> list[list[str]]:
    """tool-use with a started REPL: the child's new interpreter runs the session's cells again."""
    env = envhub.make("tool-use-v0", kind="write-report")
    rows: list[list[str]] = []
    try:
        reset_s, fork_s, disk = [], [], []
        for _ in range(iterations):
            seconds, _ = await timed(lambda: env.reset(seed=3))
            reset_s.append(seconds)
            for i, code in enumerate(REPL_CELLS):
                call = ToolCall.create("python", {"code": code}, id=f"p{i}")
                await env.step(Message(role="assistant", tool_calls=[call]))
            seconds, children = await timed(lambda: env.fork(1))
            fork_s.append(seconds)
            for child in children:
                disk.append(disk_bytes(child.sandbox))
                await child.close()
        what = f"env.fork(1), REPL of {len(REPL_CELLS)} cells"
        rows.append(["tool-use (local)", what, ms(fork_s), mib(disk)])
        rows.append(["tool-use (local)", "env.reset()", ms(reset_s), ""])
    finally:
        await env.close()
    return rows


async def browser_rows(iterations: int) -> list[list[str]]:
    """web-tasks fill-form after two fills: the child's new context replays them."""
    import random

    from envhub_browser.tasks import TASKS

    env = envhub.make("web-tasks-v0", task="fill-form")
    rows: list[list[str]] = []
    try:
        reset_s, fork_s = [], []
        for _ in range(iterations):
            seconds, _ = await timed(lambda: env.reset(seed=5))
            reset_s.append(seconds)
            fills = [s for s in TASKS["fill-form"].build(random.Random(5)).oracle if not callable(s)]
            for i, (name, arguments) in enumerate(fills[:2]):
                element = env.elements[arguments["element"][1:]].eid  # type: ignore[attr-defined]
                call = ToolCall.create(name, {**arguments, "element": element}, id=f"f{i}")
                await env.step(Message(role="assistant", tool_calls=[call]))
            seconds, children = await timed(lambda: env.fork(1))
            fork_s.append(seconds)
            for child in children:
                await child.close()
        rows.append(["web-tasks (chromium)", "env.fork(1), 2 fills replayed", ms(fork_s), "n/a (in memory)"])
        rows.append(["web-tasks (chromium)", "env.reset()", ms(reset_s), ""])
    finally:
        await env.close()
    return rows


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} ms (median of {len(values)})"


def mib(values: list[int]) -> str:
    return f"{statistics.median(values) / 2**20:.2f} MiB" if values and values[0] >= 0 else "n/a"


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--payload-mib", type=int, default=16)
    parser.add_argument("--no-docker", action="store_true")
    parser.add_argument("--parts", default="sandbox,env,repl,browser", help="which rows, comma-separated")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    backends = ["local"] if args.no_docker else ["local", "docker"]
    rows: list[list[str]] = []
    for backend in backends:
        if "sandbox" in parts:
            payload = os.urandom(args.payload_mib * 2**20)
            rows += await sandbox_rows(backend, args.iterations, workspace(), payload)
        if "env" in parts:
            rows += await env_rows(backend, args.iterations)
    if "repl" in parts:
        rows += await repl_rows(args.iterations)
    if "browser" in parts:
        rows += await browser_rows(args.iterations)
    widths = [max(len(r[i]) for r in [HEADER, *rows]) for i in range(len(HEADER))]
    for row in [HEADER, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))


HEADER = ["where", "what", "wall time per child", "child's writable disk"]

if __name__ == "__main__":
    asyncio.run(main())
