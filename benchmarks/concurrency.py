"""Thousands of concurrent model-driven episodes against a loopback OpenAI-compatible server.

    python benchmarks/concurrency.py [--levels 100 1000 5000 20000] [--delay 0.5] [--budget 75]

Each level plays `level` episodes of `guess-number-v0` (3 turns each) at concurrency `level`, through
`run_batch` with `OpenAIPolicy`, against a minimal ASGI chat-completions server (uvicorn, its own
process) that answers a short scripted reply after `--delay` seconds, as a model would. Every level
runs in a fresh process, so its peak memory is its own, and under a time budget (`--budget`), so a
stall shows as a slow level with unfinished episodes instead of a hung benchmark.

Recorded per level: steps/s (turns finished per second of wall time), p50/p99 step latency (the
policy call as the runner timed it: waiting for a connection, the request and the model delay),
the peak number of open sockets of the client process (/proc/self/fd), its peak RSS, and the
episodes that failed or were cut off.

    python benchmarks/concurrency.py serve --port 8000 --delay 0.5   # the server alone
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

REPLY = json.dumps(
    {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "model": "loopback",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "50"}, "finish_reason": "stop"}],
    }
).encode()
"""Every completion: guess 50 (guess-number then answers "higher" or "lower" until its turns run out)."""


def chat_app(delay: float) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """A bare ASGI app that reads the request, waits `delay` s (the model's time) and answers REPLY.

    Bare ASGI, not a framework: at thousands of requests a second on two cores the server must cost
    as little as possible, so the client is what is measured.
    """
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(REPLY)).encode())]

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # started with lifespan="off": only HTTP reaches here
        more = True
        while more:
            more = (await receive()).get("more_body", False)
        if delay > 0:
            await asyncio.sleep(delay)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": REPLY})

    return app


def raise_open_files_limit() -> int:
    """Raise this process's RLIMIT_NOFILE soft limit to its hard limit (each connection is one fd)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def serve(host: str, port: int, delay: float, backlog: int) -> None:
    """Run the loopback server in this process; prints `listening on PORT` once it accepts."""
    import uvicorn

    raise_open_files_limit()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    config = uvicorn.Config(
        chat_app(delay),
        log_level="warning",
        access_log=False,
        backlog=backlog,
        timeout_keep_alive=300,  # an episode's env step between two turns must not lose its connection
        lifespan="off",
    )
    print(f"listening on {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


class ServerProcess:
    """The loopback server in a child process, stopped on exit."""

    def __init__(self, delay: float, backlog: int = 65535) -> None:
        command = [sys.executable, __file__, "serve", "--port", "0", "--delay", str(delay)]
        command += ["--backlog", str(backlog)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.process.kill()
            raise RuntimeError(f"the loopback server did not start: {line!r}")
        self.base_url = f"http://127.0.0.1:{int(line.split()[-1])}/v1"

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def open_sockets() -> int:
    """Sockets this process holds now: its HTTP connections, open or still closing."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue  # closed while listed
    return count


def percentile(values: list[float], q: int) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


async def play_level(
    base_url: str, level: int, *, budget: float, turns: int, max_connections: int | None
) -> dict[str, Any]:
    """Play `level` episodes at concurrency `level`; what the runner and the process did."""
    from envhub.policies.openai import OpenAIPolicy
    from envhub.rollout import RolloutLimits, run_batch

    policy = OpenAIPolicy(
        base_url,
        "loopback",
        logprobs=False,
        max_tokens=8,
        timeout=120.0,
        max_connections=max_connections or level,
    )
    peak_sockets = 0

    async def watch() -> None:
        nonlocal peak_sockets
        while True:
            peak_sockets = max(peak_sockets, open_sockets())
            await asyncio.sleep(0.25)

    watcher = asyncio.create_task(watch())
    limits = RolloutLimits(concurrency=level, time_budget=budget, retries=0)
    started = time.perf_counter()
    try:
        result = await run_batch(
            "guess-number-v0",
            policy,
            episodes=level,
            limits=limits,
            env_kwargs={"low": 1, "high": 10**9, "max_turns": turns},
        )
    finally:
        wall = time.perf_counter() - started
        watcher.cancel()
        await policy.close()
    latencies = [float(t.info["policy_seconds"]) for e in result.episodes for t in e.turns]
    errors: dict[str, int] = {}
    for episode in result.episodes:
        if episode.error is not None:
            key = f"{episode.error.kind}: {episode.error.message[:120]}"
            errors[key] = errors.get(key, 0) + 1
    finished = sum(e.error is None and (e.terminated or e.truncated) for e in result.episodes)
    return {
        "level": level,
        "max_connections": policy._http.max_connections,
        "episodes": level,
        "finished": finished,
        "not_started": len(result.not_started),
        "steps": len(latencies),
        "wall_s": round(wall, 2),
        "steps_per_s": round(len(latencies) / wall, 1),
        "p50_step_s": round(percentile(latencies, 50), 3),
        "p99_step_s": round(percentile(latencies, 99), 3),
        "peak_sockets": peak_sockets,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "errors": errors,
    }


def run_level(args: argparse.Namespace) -> None:
    """One level in this process (so its peak RSS is its own); prints one JSON line."""
    limit = raise_open_files_limit()
    row = asyncio.run(
        play_level(
            args.base_url,
            args.level,
            budget=args.budget,
            turns=args.turns,
            max_connections=args.max_connections,
        )
    )
    row["nofile"] = limit
    print(json.dumps(row), flush=True)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table, for docs/benchmarks.md."""
    columns = [
        ("concurrent episodes", "level"),
        ("pool", "max_connections"),
        ("finished", "finished"),
        ("steps", "steps"),
        ("wall s", "wall_s"),
        ("steps/s", "steps_per_s"),
        ("p50 step s", "p50_step_s"),
        ("p99 step s", "p99_step_s"),
        ("peak sockets", "peak_sockets"),
        ("peak RSS MiB", "peak_rss_mib"),
        ("failed", "failed"),
    ]
    lines = ["| " + " | ".join(c for c, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        row = {**row, "failed": sum(row["errors"].values())}
        lines.append("| " + " | ".join(str(row[key]) for _, key in columns) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    server = sub.add_parser("serve", help="run the loopback server alone")
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--port", type=int, default=8000)
    server.add_argument("--delay", type=float, default=0.5)
    server.add_argument("--backlog", type=int, default=65535)
    level = sub.add_parser("level", help="one level against a running server (one JSON line)")
    level.add_argument("--base-url", required=True)
    level.add_argument("--level", type=int, required=True)
    level.add_argument("--budget", type=float, default=75.0)
    level.add_argument("--turns", type=int, default=3)
    level.add_argument("--max-connections", type=int, default=None)
    parser.add_argument("--levels", type=int, nargs="+", default=[100, 1000, 5000, 20000])
    parser.add_argument("--delay", type=float, default=0.5, help="the model's seconds per completion")
    parser.add_argument("--budget", type=float, default=75.0, help="seconds per level at most")
    parser.add_argument("--turns", type=int, default=3, help="turns per episode")
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="OpenAIPolicy(max_connections=...) (default: one per concurrent episode)",
    )
    args = parser.parse_args()
    if args.command == "serve":
        serve(args.host, args.port, args.delay, args.backlog)
        return
    if args.command == "level":
        run_level(args)
        return
    rows = []
    with ServerProcess(args.delay) as loopback:
        for n in args.levels:
            command = [sys.executable, __file__, "level", "--base-url", loopback.base_url]
            command += ["--level", str(n), "--budget", str(args.budget), "--turns", str(args.turns)]
            command += ["--max-connections", str(args.max_connections or n)]
            out = subprocess.run(command, capture_output=True, text=True, timeout=args.budget + 120)
            if out.returncode != 0:
                raise SystemExit(f"level {n} failed:\n{out.stderr[-3000:]}")
            row = json.loads(out.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\nguess-number-v0, {args.turns} turns per episode, model delay {args.delay} s:\n")
    print(table(rows))


if __name__ == "__main__":
    main()
