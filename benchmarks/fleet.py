"""Sandbox creations per second, per provider, straight from the backend and through the fleet.

python benchmarks/fleet.py [--creations N] [--concurrency C ...] [--no-docker] [--rate R]

Each measurement opens N sandboxes (C at a time), runs `true` in each (so a sandbox is known to work,
not only to exist) and closes it; creations/s is N over the wall time. "backend" is
`envhub.sandbox.backends.create`; "fleet" is the same provider as a fleet's only one, so the difference
is the fleet's own work (quota, lease file written and removed, heartbeat). Each side is measured twice,
in the order backend, fleet, fleet, backend, and the two rates averaged. With `--rate R`, a last row
shows the fleet's token bucket holding creations to R per second. A last line times the fleet's own
bookkeeping per sandbox with no backend at all (what the ratio column cannot resolve on a busy host).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from envhub.sandbox import IsolationPolicy, Sandbox
from envhub.sandbox.backends import create
from envhub.sandbox.fleet import Fleet, FleetConfig, Provider

POLICY = IsolationPolicy(memory_mb=256, pids=64, wall_time_s=60)


async def rate(open_one: Callable[[], Awaitable[Sandbox]], creations: int, concurrency: int) -> float:
    """Creations per second: open, run `true`, close, `creations` times, `concurrency` at once."""
    slots = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with slots:
            box = await open_one()
            try:
                assert (await box.exec("true")).ok
            finally:
                await box.close()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(creations)))
    return creations / (time.perf_counter() - started)


async def measure(
    provider: Literal["local", "docker"], creations: int, concurrency: int, leases: Path, limit: float | None
) -> None:
    config = FleetConfig(providers=(Provider(name=provider, rate_per_s=limit),), lease_dir=leases)
    fleet = Fleet(config)
    backend_rates, fleet_rates = [], []
    try:  # A-B-B-A: a warming or a busier host favours neither side
        for through_fleet in (False, True, True, False):
            if through_fleet:
                fleet_rates.append(await rate(lambda: fleet.open(POLICY), creations, concurrency))
            else:
                backend_rates.append(
                    await rate(lambda: create(provider, POLICY, None, {}), creations, concurrency)
                )
    finally:
        fleet.close()
    direct, through = statistics.mean(backend_rates), statistics.mean(fleet_rates)
    label = f"{through:.1f} (under a {limit:g}/s limit)" if limit else f"{through:.1f}"
    print(
        f"| {provider} | {concurrency} | {direct:.1f} | {label} | {100 * through / direct:.0f}% |", flush=True
    )


def bookkeeping_ms(leases: Path, n: int = 2000) -> float:
    """The fleet's own work per sandbox, apart from any backend: a quota taken and given back, a lease
    granted, renewed once (one heartbeat) and released. Milliseconds each."""
    from envhub.sandbox.fleet import LeaseBook, Quota

    book, quota = LeaseBook(leases, 30.0), Quota(None)
    started = time.perf_counter()
    for i in range(n):
        quota.try_take()
        lease = book.grant("local", f"/tmp/envhub-sandbox-bench-{i}")
        book.renew(lease)
        book.release(lease)
        quota.give_back()
    return 1000 * (time.perf_counter() - started) / n


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--creations", type=int, default=40)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--no-docker", action="store_true")
    parser.add_argument(
        "--rate", type=float, default=None, help="also measure the fleet under this rate limit"
    )
    args = parser.parse_args()
    providers: list[Literal["local", "docker"]] = ["local"] if args.no_docker else ["local", "docker"]
    print("| provider | concurrency | backend creations/s | fleet creations/s | fleet/backend |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="envhub-fleet-bench-") as leases:
        for provider in providers:
            for concurrency in args.concurrency:
                await measure(provider, args.creations, concurrency, Path(leases), None)
            if args.rate:
                await measure(provider, args.creations, max(args.concurrency), Path(leases), args.rate)
        print(
            f"\nfleet bookkeeping per sandbox (quota, lease grant + 1 renewal + release): "
            f"{bookkeeping_ms(Path(leases)):.3f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
