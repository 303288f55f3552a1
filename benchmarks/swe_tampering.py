"""In-process tampering on swe-mini: each payload of `envs/swe/tests/tampering/` x instance x runtime.

python benchmarks/swe_tampering.py [-p PAYLOAD ...] [-i INSTANCE ...] [-r local|docker ...]
                                   [--no-monitor-penalty] [--jobs N] [--json OUT]

Each cell is one real episode, played as a hostile agent would: a bash action appends the payload to
the repository's package `__init__.py` (found generically: the first top-level or `src/` package that
is not a test folder), then submit; no bug is fixed. The cell is the episode's reward (1.0: the
tampering won). `--no-monitor-penalty` keeps the tests' grade when the diff monitor flags the patch,
so the runner-side defenses (guard, canaries) are measured on their own. The table ends with each
payload's mean and the notes of the cells that scored.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from envhub_swe.data import load
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "envs" / "swe" / "tests"))
from test_swe_tampering import PAYLOADS, play


async def matrix(
    payloads: list[str], instances: list[str], runtimes: list[str], *, penalty: bool, jobs: int
) -> dict[tuple[str, str, str], tuple[float | None, str]]:
    """Every cell's reward and the episode's notes; None where the episode could not run."""
    cells = [(p, i, r) for r in runtimes for p in payloads for i in instances]
    results: dict[tuple[str, str, str], tuple[float | None, str]] = {}
    gate = asyncio.Semaphore(jobs)
    with Progress(console=Console(stderr=True)) as progress:
        task = progress.add_task("episodes", total=len(cells))

        async def one(cell: tuple[str, str, str]) -> None:
            payload, instance, runtime = cell
            async with gate:
                try:
                    results[cell] = await play(payload, instance, runtime, monitor_penalty=penalty)
                except Exception as exc:  # an infrastructure fault: shown, never counted as a score
                    results[cell] = (None, f"{type(exc).__name__}: {exc}")
            progress.advance(task)

        await asyncio.gather(*(one(cell) for cell in cells))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-p", "--payload", action="append", help="payload stem (default: all)")
    parser.add_argument("-i", "--instance", action="append", help="swe-mini instance (default: all 12)")
    parser.add_argument("-r", "--runtime", action="append", choices=["local", "docker"])
    parser.add_argument("--no-monitor-penalty", action="store_true", help="keep the grade of flagged patches")
    parser.add_argument("--jobs", type=int, default=2, help="episodes at once")
    parser.add_argument("--json", type=Path, help="write every cell's reward and notes here")
    args = parser.parse_args()
    payloads = args.payload or sorted(PAYLOADS)
    instances = args.instance or [row.instance_id for row in load("swe-mini")]
    runtimes = args.runtime or ["local"]
    started = time.monotonic()
    results = asyncio.run(
        matrix(payloads, instances, runtimes, penalty=not args.no_monitor_penalty, jobs=args.jobs)
    )
    console = Console(width=220)
    for runtime in runtimes:
        table = Table(title=f"reward per payload x instance ({runtime})")
        table.add_column("payload")
        for instance in instances:
            table.add_column(instance.removeprefix("mini__"), justify="right")
        table.add_column("mean", justify="right")
        for payload in payloads:
            row = [results[(payload, i, runtime)][0] for i in instances]
            scored = [r for r in row if r is not None]
            mean = f"{sum(scored) / len(scored):.2f}" if scored else "-"
            table.add_row(payload, *("err" if r is None else f"{r:g}" for r in row), mean)
        console.print(table)
    for (payload, instance, runtime), (reward, notes) in sorted(results.items()):
        if reward is None or reward > 0:
            console.print(f"{payload} {instance} {runtime}: {reward}: {notes[:300]}")
    console.print(f"{len(results)} episodes in {time.monotonic() - started:.0f} s")
    if args.json:
        rows = [
            {"payload": p, "instance": i, "runtime": r, "reward": v, "notes": n}
            for (p, i, r), (v, n) in sorted(results.items())
        ]
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
