"""What one `exec` in an open local sandbox costs beside the plainest ways to run the same program.

python benchmarks/exec_overhead.py [--rounds 3] [--iterations 100]

Each iteration runs `/bin/true` three ways, in turn: `subprocess.run` (no pipes, the loop blocked: the
plainest baseline), an asyncio subprocess with pipes (what `envhub bench sandbox` once compared with),
and `sb.exec(["true"])` in one open sandbox (no spares being made beside it). Medians per round, the
ratios to both baselines, the load, and the verdict of issue 33 (exec <= 1.5x `subprocess.run`).

It uses only the public API, so the same script measures an older tree: `PYTHONPATH=<old checkout>`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import time

from rich.console import Console
from rich.table import Table

import envhub.sandbox as sandbox

GOAL = 1.5


async def one_round(sb: sandbox.Sandbox, iterations: int) -> tuple[float, float, float]:
    """Medians (ms) of subprocess.run, an asyncio subprocess and the sandbox's exec, interleaved."""
    plain: list[float] = []
    piped: list[float] = []
    boxed: list[float] = []
    for _ in range(iterations):
        start = time.perf_counter()
        subprocess.run(["/bin/true"], check=False)  # noqa: ASYNC221 - the blocking baseline is the point
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            "/bin/true",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        await proc.communicate()
        piped.append(time.perf_counter() - start)
        start = time.perf_counter()
        await sb.exec(["true"])
        boxed.append(time.perf_counter() - start)
    return tuple(statistics.median(samples) * 1000 for samples in (plain, piped, boxed))  # type: ignore[return-value]


async def measure(rounds: int, iterations: int) -> list[tuple[float, float, float, float]]:
    results = []
    async with sandbox.open("local", spare=False) as sb:
        for _ in range(5):
            await sb.exec(["true"])  # the exec server starts with the first command
        for _ in range(rounds):
            results.append((*await one_round(sb, iterations), os.getloadavg()[0]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=100)
    args = parser.parse_args()
    rows = asyncio.run(measure(args.rounds, args.iterations))
    table = Table(title=f"exec `true`: medians of {args.iterations}, interleaved")
    for column in ("round", "subprocess.run", "asyncio", "sandbox exec", "/ run", "/ asyncio", "load"):
        table.add_column(column, justify="right")
    for i, (plain, piped, boxed, load) in enumerate(rows, 1):
        table.add_row(
            str(i),
            f"{plain:.3f} ms",
            f"{piped:.3f} ms",
            f"{boxed:.3f} ms",
            f"{boxed / plain:.2f}x",
            f"{boxed / piped:.2f}x",
            f"{load:.2f}",
        )
    console = Console()
    console.print(table)
    ratios = sorted(boxed / plain for plain, _, boxed, _ in rows)
    median = statistics.median(ratios)
    verdict = "met" if median <= GOAL else "MISSED"
    console.print(
        f"exec / subprocess.run: median {median:.2f}x, spread {ratios[0]:.2f}-{ratios[-1]:.2f}x "
        f"(goal <= {GOAL:g}x): {verdict}"
    )


if __name__ == "__main__":
    main()
