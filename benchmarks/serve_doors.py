"""`envhub serve` under hostile sockets: memory, an authorised client's wait, and how long the sockets stay.

    python benchmarks/serve_doors.py [--frames 4] [--idle 150] [--half 100] [--sockets 20] [--hold 20]
    python benchmarks/serve_doors.py --server-path /tmp/before   # a server from another checkout's envhub/

The attack of tests/serve/test_doors.py, larger and measured: `envhub serve guess-number --token T
--max-sessions 2` (no other option, so that a server from before the doors runs it too) with a
descriptor limit of 256; from 127.0.0.2, `--frames` websockets each sending a 60 MiB first frame without
the token, `--idle` idle sockets, `--half` half-sent request headers, `--sockets` unauthenticated
websockets that say nothing. Then an authorised client from 127.0.0.1 opens a session (given up after
40 s). Printed: the server's resident memory before the attack and at its peak, the client's time to a
first observation, and how many hostile sockets the server still holds open `--hold` seconds later.
`--server-path DIR` runs the server in DIR with `PYTHONPATH=DIR` (a `git archive HEAD envhub | tar -x -C DIR`
of an older commit), for before/after figures from the same machine and minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import subprocess
import sys
import time

from envhub.core import InfrastructureError
from envhub.serve.client import RemoteEnv
from tests.envhub_testkit.processes import interrupt
from tests.serve.test_doors import Attack, limited_descriptors, memory

TOKEN = "s3cret"


def start(server_path: str | None) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "envhub", "serve", "guess-number", "--port", "0", "--token", TOKEN]
    env = {**os.environ, "PYTHONPATH": server_path} if server_path else None
    process = subprocess.Popen(
        [*command, "--max-sessions", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=server_path,  # `python -m` puts the working directory first on the path
        preexec_fn=limited_descriptors,
    )
    assert process.stdout is not None
    select.select([process.stdout], [], [], 60)
    line = process.stdout.readline()
    if "ws://" not in line:
        interrupt(process)
        raise SystemExit(f"the server did not start: {line!r}")
    return process, line.split()[-1]


async def still_open(attack: Attack) -> int:
    """Hostile sockets the server has not closed yet (a zero-second look at each)."""
    return await attack.cut(0.01)


async def main(args: argparse.Namespace) -> None:
    process, base = start(args.server_path)
    port = int(base.rpartition(":")[2])
    attack = Attack(port)
    try:
        warm = RemoteEnv(f"{base}/guess-number", token=TOKEN)
        await warm.reset(seed=0)
        await warm.close()
        before = memory(process.pid)
        sessions = ["/guess-number-v0", "/openenv/guess-number-v0/ws"]
        started = time.monotonic()
        await attack.large_frames(args.frames, sessions)
        await attack.idle(args.idle)
        await attack.half_headers(args.half)
        await attack.unauthenticated_websockets(args.sockets, sessions)
        attack_seconds = time.monotonic() - started
        peak = memory(process.pid)["VmHWM"]
        started = time.monotonic()
        try:
            env = RemoteEnv(f"{base}/guess-number", token=TOKEN)
            await asyncio.wait_for(env.reset(seed=1), 40)
            await env.close()
            opened = f"{time.monotonic() - started:.2f} s"
        except (InfrastructureError, TimeoutError) as exc:
            opened = f"no ({type(exc).__name__} after {time.monotonic() - started:.0f} s)"
        await asyncio.sleep(max(args.hold - (time.monotonic() - started), 0))
        held = await still_open(attack)
        print(
            f"server {args.server_path or 'this checkout'}: {len(attack.sockets)} hostile sockets in "
            f"{attack_seconds:.1f} s; RSS {before['VmRSS'] / 2**20:.0f} MiB before, peak "
            f"{peak / 2**20:.0f} MiB; authorised session opened: {opened}; hostile sockets still open "
            f"after {args.hold:g} s: {held}/{len(attack.sockets)}"
        )
    finally:
        attack.close()
        interrupt(process)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--idle", type=int, default=150)
    parser.add_argument("--half", type=int, default=100)
    parser.add_argument("--sockets", type=int, default=20)
    parser.add_argument("--hold", type=float, default=20.0)
    parser.add_argument("--server-path", default=None)
    asyncio.run(main(parser.parse_args()))
