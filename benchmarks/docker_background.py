"""Docker background programs (`Sandbox.start_background`): what one costs, and what it adds to every
command while it runs (the clean-up then walks /proc/*/stat in shell instead of one `kill -9 -1`).

python benchmarks/docker_background.py [--runs N] [--image TAG]

Prints p50s in ms and the load average, since the figures move with it: `true` with no background
program, the persistent worker's `run('pass')` (200 calls), `true` while the worker runs, and a start
plus kill of `sleep`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

import envhub.sandbox as sandbox
from envhub.sandbox import IsolationPolicy


async def p50_ms(call: Callable[[], Awaitable[object]], runs: int) -> float:
    times = []
    for _ in range(runs):
        begun = time.perf_counter()
        await call()
        times.append((time.perf_counter() - begun) * 1000)
    return statistics.median(times)


async def main(runs: int, image: str | None) -> None:
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    async with sandbox.open("docker", policy=IsolationPolicy(), image=image) as sb:
        alone = await p50_ms(lambda: sb.exec(["true"]), runs)
        async with await sb.python() as py:
            worker = await p50_ms(lambda: py.run("pass"), max(runs, 200))
            beside = await p50_ms(lambda: sb.exec(["true"]), runs)

        async def start_and_kill() -> None:
            background = await sb.start_background(["sleep", "300"])
            await background.kill()

        cycle = await p50_ms(start_and_kill, max(runs // 2, 5))
    print(f"`true` alone: {alone:.1f} ms; `true` beside a background program: {beside:.1f} ms")
    print(f"worker run('pass'): {worker:.2f} ms; background start + kill: {cycle:.1f} ms")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--image", default=None)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.image))
