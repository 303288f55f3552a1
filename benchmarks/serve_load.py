"""Step latency of remote envs (`envhub serve` on loopback) next to the same envs in-process.

    python benchmarks/serve_load.py [--sessions 1000] [--env guess-number]

N episodes run at once, each on its own env, played by a scripted binary search (no model, no
oracle round trip): first N in-process envs on one event loop, then N remote sessions of one
`envhub serve` process on 127.0.0.1. Each step is timed around `await env.step(...)`, so with N
episodes in flight a step's latency includes its wait for the loop (and, remote, for the server):
the table compares p50/p99 of both, and how many episodes failed (must be none).
"""

from __future__ import annotations

import argparse
import asyncio
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table

import envhub


@dataclass
class Run:
    """What one setting measured: each step's latency, wall time, failed episodes."""

    step_seconds: list[float] = field(default_factory=list)
    wall_seconds: float = 0.0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def quantile(self, q: float) -> float:
        return statistics.quantiles(self.step_seconds, n=1000)[int(q * 1000) - 1]


async def play(env: envhub.Env, seed: int, run: Run) -> None:
    """One guess-number episode by binary search over the feedback, each step timed."""
    low, high = 1, 100
    async with env:
        await env.reset(seed=seed)
        while True:
            guess = (low + high) // 2
            started = time.perf_counter()
            result = await env.step(str(guess))
            run.step_seconds.append(time.perf_counter() - started)
            feedback = result.observation[0].text if result.observation else ""
            if result.terminated or result.truncated:
                return
            low, high = (guess + 1, high) if feedback == "higher" else (low, guess - 1)


async def measure(make_env: Callable[[], envhub.Env], sessions: int) -> Run:
    run = Run()
    envs = [make_env() for _ in range(sessions)]  # made first: a remote make reads the spec once
    started = time.perf_counter()
    results = await asyncio.gather(*(play(env, i, run) for i, env in enumerate(envs)), return_exceptions=True)
    run.wall_seconds = time.perf_counter() - started
    failures = [r for r in results if isinstance(r, BaseException)]
    run.failed, run.errors = len(failures), sorted({f"{type(f).__name__}: {f}" for f in failures})[:3]
    return run


def start_server(env_id: str, sessions: int) -> tuple[subprocess.Popen[str], str]:
    """`envhub serve` in its own process on a free loopback port; returns it and its ws:// base."""
    command = [
        sys.executable,
        "-m",
        "envhub",
        "serve",
        env_id,
        "--port",
        "0",
        "--max-sessions",
        str(sessions),
    ]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], 60)
    line = server.stdout.readline() if ready else ""
    if "ws://" not in line:
        server.kill()
        raise SystemExit(f"envhub serve did not start: {line!r}")
    return server, line.split()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000, help="episodes (remote sessions) at once")
    parser.add_argument("--env", default="guess-number", help="a cheap env the binary search can play")
    args = parser.parse_args()

    local = asyncio.run(measure(lambda: envhub.make(args.env), args.sessions))
    server, base = start_server(args.env, args.sessions)
    try:
        remote = asyncio.run(measure(lambda: envhub.make(f"{base}/{args.env}"), args.sessions))
    finally:
        server.terminate()
        server.wait()

    table = Table(title=f"{args.sessions:,} concurrent episodes of {args.env}: step latency (ms)")
    for column in ("setting", "steps", "p50", "p99", "wall s", "steps / s", "failed episodes"):
        table.add_column(column, justify="left" if column == "setting" else "right")
    for name, run in (("in-process", local), ("remote (envhub serve)", remote)):
        table.add_row(
            name,
            f"{len(run.step_seconds):,}",
            f"{run.quantile(0.5) * 1e3:.2f}",
            f"{run.quantile(0.99) * 1e3:.2f}",
            f"{run.wall_seconds:.2f}",
            f"{len(run.step_seconds) / run.wall_seconds:,.0f}",
            str(run.failed),
        )
    console = Console(width=110)  # the table whole, also when piped
    console.print(table)
    console.print(
        f"remote / in-process: p50 {remote.quantile(0.5) / local.quantile(0.5):.1f}x, "
        f"p99 {remote.quantile(0.99) / local.quantile(0.99):.1f}x"
    )
    for name, run in (("in-process", local), ("remote", remote)):
        if run.failed:
            raise SystemExit(f"{run.failed} {name} episodes failed, e.g. {run.errors}")


if __name__ == "__main__":
    main()
