"""`envhub bench sandbox`: what isolation costs, side by side with a plain subprocess (and Docker).

Each row runs the same work through a plain `asyncio` subprocess (the baseline), the local backend and,
when an engine and the image are present, the docker backend. Medians (p50) of `iterations` runs; the
baseline's runs alternate with the local backend's, so that a ratio compares runs of the same seconds.

A cold start is measured three ways, since the local backend keeps started spares (as many as its open
rate wants): back to back (the next open comes as soon as the last closed), with the spares ready (the
wait for them is not timed: what an episode sees when episodes start slower than spares are made), and
with a policy of the sandbox's own (an environment's grading policy: spares of it from its second open).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rich.console import Group
from rich.table import Table
from rich.text import Text

import envhub.sandbox as sandbox
from envhub.sandbox.policy import IsolationPolicy
from envhub.sandbox.spares import close_spares, spare_count, spares_idle

PY = "/usr/bin/python3"
EXEC_SAMPLES = 200
"""The fewest runs of each exec row's three commands, interleaved: a median of 40 moved by 0.1x from run
to run on a 2-vCPU host (1.34-1.53x against `subprocess.run`, 2026-12-07), across the 1.5x goal."""
Timed = Callable[[], Awaitable[None]]


GOALS: dict[str, float] = {"true": 1.5, "true_asyncio": 1.5, "cold": 2.0, "ready": 1.5}
"""The most local / subprocess each row may cost (issue 33): the printed verdicts hold the rows to them."""


@dataclass
class Row:
    key: str
    """Which measurement (a key of GOALS where the row has a goal)."""
    name: str
    """A short name, so the table fits an 80-column terminal."""
    metric: str
    """What was measured, in full: printed under the table."""
    unit: str
    values: dict[str, float | None] = field(default_factory=dict)


async def _p50_ms(fn: Timed, n: int, *, untimed: Timed | None = None) -> float:
    """The median of `n` runs of `fn`; `untimed` runs before each, off the clock."""
    samples = []
    for _ in range(n):
        if untimed is not None:
            await untimed()
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


async def _paired_p50_ms(
    fn: Timed, base: Timed, n: int, *, untimed: Timed | None = None
) -> tuple[float, float]:
    """Medians of `fn` and of its baseline, run alternately (`untimed` before each)."""
    medians = await _interleaved_p50_ms([base, fn], n, untimed=untimed)
    return medians[1], medians[0]


async def _interleaved_p50_ms(fns: list[Timed], n: int, *, untimed: Timed | None = None) -> list[float]:
    """The median of each of `fns`, run in turn, round after round (`untimed` before each): on a shared
    host the load drifts from minute to minute, and a ratio of figures taken apart would measure the drift."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(n):
        for each, kept in zip(fns, samples, strict=True):
            if untimed is not None:
                await untimed()
            start = time.perf_counter()
            await each()
            kept.append(time.perf_counter() - start)
    return [statistics.median(kept) * 1000 for kept in samples]


async def _per_second(make: Timed, n: int, workers: int = 2) -> float:
    async def worker() -> None:
        for _ in range(n // workers):
            await make()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return (n // workers) * workers / (time.perf_counter() - start)


async def _subprocess(*argv: str, stdin: bytes | None = None) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await proc.communicate(stdin)


async def _plain_run_true() -> None:
    """The plainest baseline there is: `subprocess.run`, no pipes, blocking the loop as it waits."""
    subprocess.run(["/bin/true"], check=False)  # noqa: ASYNC221 - the blocking baseline is the point


async def _plain_python() -> None:
    await _subprocess(PY, "-c", "pass")


async def _plain_worker_p50(n: int) -> float:
    """The worker protocol with no sandbox at all: what the sandboxed worker is compared with."""
    from envhub.sandbox.python_repl import _SERVER

    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-u", "-c", _SERVER, "65536",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    await proc.stdout.readline()
    request = json.dumps({"code": "pass", "timeout": 5}).encode() + b"\n"

    async def call() -> None:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(request)
        await proc.stdin.drain()
        await proc.stdout.readline()

    try:
        return await _p50_ms(call, n)
    finally:
        proc.kill()
        await proc.wait()


async def _spares_made() -> None:
    """Wait until this loop's spare local sandboxes are all started: nothing of ours is left running in
    the background, and the next open takes a spare."""
    if spare_count() == 0:
        return  # spares are off (ENVHUB_SANDBOX_SPARES=0): every open starts a sandbox
    async with asyncio.timeout(60):
        while spares_idle() < spare_count():  # noqa: ASYNC110 - the spares have no event to wait on
            await asyncio.sleep(0.005)


async def _local_rows(n: int) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """The local backend's figures and, per row, the plain subprocess's measured alongside them."""
    policy = IsolationPolicy()
    own = IsolationPolicy(memory_mb=384)  # any policy but the default: its spares come from its open rate
    base: dict[str, float | None] = {}
    out: dict[str, float | None] = {}

    async def cold(policy: IsolationPolicy = policy) -> None:
        async with sandbox.open("local", policy=policy) as sb:
            await sb.exec([PY, "-c", "pass"])

    async with sandbox.open("local"):
        pass  # the first open makes this loop's spares: let them start before anything is timed
    await _spares_made()
    base["cold"] = await _p50_ms(_plain_python, n)  # back to back keeps spares warming: measured apart
    out["cold"] = await _p50_ms(cold, n)
    out["ready"], base["ready"] = await _paired_p50_ms(cold, _plain_python, n, untimed=_spares_made)
    await _spares_made()
    out["own"], base["own"] = await _paired_p50_ms(lambda: cold(own), _plain_python, n)
    # The rows above leave spares made and in the making (as many as the back-to-back opens wanted): an
    # exec timed beside a sandbox being built measures the build. None from here to the create+close row.
    await close_spares()
    async with sandbox.open("local", spare=False) as sb:
        python, true = [PY, "-c", "pass"], ["true"]
        out["warm"], base["warm"] = await _paired_p50_ms(lambda: _discard(sb.exec(python)), _plain_python, n)
        base["true"], base["true_asyncio"], out["true"] = await _interleaved_p50_ms(
            [_plain_run_true, lambda: _subprocess("/bin/true"), lambda: _discard(sb.exec(true))],
            max(n, EXEC_SAMPLES),
        )
        out["true_asyncio"] = out["true"]
        out["worker"] = await _worker_p50(sb, n)
    base["worker"] = await _plain_worker_p50(max(n, 200))

    async def create() -> None:
        async with sandbox.open("local"):
            pass

    base["rate"] = await _per_second(lambda: _subprocess("true"), max(4, n))
    out["rate"] = await _per_second(create, max(4, n))
    return out, base


async def _worker_p50(sb: sandbox.Sandbox, n: int) -> float | None:
    """The persistent Python worker's `run('pass')` round trip in `sb`; None where it has no python."""
    try:
        py = await sb.python()
    except sandbox.SandboxUnavailable:
        return None
    async with py:
        return await _p50_ms(lambda: _discard(py.run("pass")), max(n, 200))


async def _docker_rows(n: int, image: str | None) -> dict[str, float | None]:
    policy = IsolationPolicy()

    async def cold() -> None:
        async with sandbox.open("docker", policy=policy, image=image) as sb:
            await sb.exec(["python3", "-c", "pass"])

    async def create() -> None:
        async with sandbox.open("docker", policy=policy, image=image):
            pass

    out: dict[str, float | None] = {"cold": await _p50_ms(cold, n), "ready": None, "own": None}
    async with sandbox.open("docker", policy=policy, image=image) as sb:
        out["warm"] = await _p50_ms(lambda: _discard(sb.exec(["python3", "-c", "pass"])), n)
        out["true"] = out["true_asyncio"] = await _p50_ms(lambda: _discard(sb.exec(["true"])), n)
        out["worker"] = await _worker_p50(sb, n)
    out["rate"] = await _per_second(create, max(4, n))
    return out


async def _discard(aw: Awaitable[object]) -> None:
    await aw


async def measure(iterations: int = 50, *, docker: bool | None = None, image: str | None = None) -> list[Row]:
    """Run every comparison; `docker=None` includes Docker when an engine and the image are present."""
    local, base = await _local_rows(iterations)
    columns = {"subprocess": base, "local": local}
    if docker is not False:
        try:
            columns["docker"] = await _docker_rows(max(3, iterations // 10), image)
        except sandbox.SandboxUnavailable:
            if docker:
                raise
    labels = {
        "cold": ("cold start", "open + `python -c pass` + close, back to back, p50", "ms"),
        "ready": ("ready start", "the same, with the spares started (untimed wait; local only), p50", "ms"),
        "own": (
            "own policy",
            "the same, with a policy of its own (spares of it from its second open), p50",
            "ms",
        ),
        "warm": ("python", "`python -c pass` in an open sandbox, p50", "ms"),
        "true": ("exec", "`true` in an open sandbox vs `subprocess.run(['/bin/true'])`, p50", "ms"),
        "true_asyncio": ("exec (asyncio)", "the same exec vs an asyncio subprocess with pipes, p50", "ms"),
        "worker": ("worker call", "persistent worker `run('pass')` round trip, p50", "ms"),
        "rate": (
            "create+close",
            "sandboxes opened + closed per second, 2 workers (each takes a spare that started its bwrap)",
            "/s",
        ),
    }
    return [
        Row(key, name, metric, unit, {backend: col.get(key) for backend, col in columns.items()})
        for key, (name, metric, unit) in labels.items()
    ]


def verdicts(rows: list[Row]) -> list[str]:
    """A line per row with a goal: its local / subprocess ratio against the goal, met or missed."""
    lines = []
    for row in rows:
        goal = GOALS.get(row.key)
        base, local = row.values.get("subprocess"), row.values.get("local")
        if goal is None or not base or not local:
            continue
        ratio = local / base
        lines.append(f"{row.name}: {ratio:.2f}x (goal <= {goal:g}x): {'met' if ratio <= goal else 'MISSED'}")
    return lines


def to_table(rows: list[Row], *, load: tuple[float, float] | None = None) -> Group:
    """One short line per metric (the unit beside its name), the full descriptions under the table:
    long labels in a cell would wrap into unreadable columns on an 80-column terminal. Then the
    verdicts, and the machine's load around the run (`load`: 1-minute averages before and after)."""
    backends = list(rows[0].values)
    table = Table(title="envhub sandbox benchmark (subprocess = no isolation)")
    table.add_column("metric", no_wrap=True)
    for backend in backends:
        table.add_column(backend, justify="right", no_wrap=True)
    table.add_column("ratio", justify="right", no_wrap=True)
    for row in rows:
        cells = [f"{v:.2f}" if v is not None else "n/a" for v in row.values.values()]
        base, local = row.values.get("subprocess"), row.values.get("local")
        ratio = f"{local / base:.2f}x" if base and local else "n/a"
        table.add_row(f"{row.name} ({row.unit})", *cells, ratio)
    legend = [f"{row.name}: {row.metric}" for row in rows]
    notes = [
        "ratio: local / subprocess; the subprocess runs alternate with the local ones, run by run (cold"
        " start: measured just before, since back to back opens keep spares warming)"
    ]
    if load is not None:
        notes.append(f"load average (1 min): {load[0]:.2f} before, {load[1]:.2f} after")
    return Group(table, Text("\n".join([*legend, *notes]), style="dim"), Text("\n".join(verdicts(rows))))


def run_benchmark(iterations: int = 50, *, docker: bool | None = None, image: str | None = None) -> Group:
    """The CLI's entry point: measure and return the comparison: a table and what each row measures."""
    before = os.getloadavg()[0]
    rows = asyncio.run(measure(iterations, docker=docker, image=image))
    return to_table(rows, load=(before, os.getloadavg()[0]))
