"""What one local sandbox costs in CPU to make, run `true` in and close, with each exec server.

python benchmarks/sandbox_cpu.py [--sandboxes 30] [--rounds 2]

On a small host at concurrency, CPU is what bounds how many sandboxes open per second (see
`sandbox_opens.py`), so this counts it: the CPU of the processes each sandbox started (bwrap, the
launcher, the exec server, `true`; reaped children's rusage) and of this process (the host's side), per
sandbox, for the C exec server and launcher (`native`) and for the Python server with `setpriv` and `sh`
(`python`), alternated round by round. Beside them, a plain `python3 -I -S -c pass`, the interpreter
start the Python server pays.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import time

from rich.console import Console
from rich.table import Table

import envhub.sandbox as sandbox

KINDS = ("native", "python")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def per_sandbox(kind: str, count: int) -> tuple[float, float]:
    """CPU ms per sandbox (its processes, this process) with ENVHUB_SANDBOX_EXEC_SERVER=kind."""
    os.environ["ENVHUB_SANDBOX_EXEC_SERVER"] = kind
    async with sandbox.open("local", spare=False) as sb:
        await sb.exec(["true"])  # the C server's build, if any, is not a sandbox's cost
    children, host = children_cpu(), time.process_time()
    for _ in range(count):
        async with sandbox.open("local", spare=False) as sb:
            await sb.exec(["true"])
    return (children_cpu() - children) / count * 1e3, (time.process_time() - host) / count * 1e3


def interpreter_start(count: int) -> float:
    before = children_cpu()
    for _ in range(count):
        subprocess.run(["python3", "-I", "-S", "-c", "pass"], check=True, env={"PATH": "/usr/bin:/bin"})
    return (children_cpu() - before) / count * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandboxes", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    seen: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    load = os.getloadavg()[0]
    for _ in range(args.rounds):
        for kind in KINDS:
            seen[kind].append(asyncio.run(per_sandbox(kind, args.sandboxes)))
    table = Table(title=f"CPU per local sandbox (open, exec `true`, close), medians of {args.rounds} rounds")
    for column in ("exec server", "its processes", "host process", "total"):
        table.add_column(column, justify="right" if column != "exec server" else "left")
    for kind in KINDS:
        children = statistics.median(c for c, _ in seen[kind])
        host = statistics.median(h for _, h in seen[kind])
        table.add_row(kind, f"{children:.1f} ms", f"{host:.1f} ms", f"{children + host:.1f} ms")
    table.caption = (
        f"python3 -I -S -c pass alone: {interpreter_start(args.sandboxes):.1f} ms; "
        f"load {load:.2f} before, {os.getloadavg()[0]:.2f} after"
    )
    Console().print(table)


if __name__ == "__main__":
    main()
