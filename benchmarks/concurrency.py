"""Thousands of concurrent model-driven episodes against a loopback OpenAI-compatible server.

    python benchmarks/concurrency.py [--levels 1000 5000 20000] [--delay 0.5] [--budget 60] [--gc ...]

Each level plays `level` episodes of `guess-number-v0` (3 turns each) at concurrency `level`, through
`run_batch` with `OpenAIPolicy` (at most 1,024 connections by default), against a minimal
chat-completions server (raw asyncio, its own process) that answers a short scripted reply after
`--delay` seconds, as a model would. Every level runs in a fresh process, so its peak memory is its
own, and under a time budget (`--budget`), so a stall shows as a slow level with unfinished episodes
instead of a hung benchmark; each level runs once per GC policy (`--gc`: CPython's defaults, then
envhub.rollout.gc_policy.batch_gc), so the before/after rows come from the same minutes.

A stall, measured: the longest time without a finished turn (from the start, so the time to the first
turn counts; and from the first turn on), how late a 0.25 s timer of the event loop woke at worst (loop
lag), and the p99 step latency against the server's own p99 service time (what a turn would cost with
no client in the way).
Recorded with them per level: steps/s (turns finished per second of wall time), p50/p99 step latency
(the policy call as the runner timed it: waiting for a connection, the request and the model delay),
the client's CPU per turn and the server's per request, the cyclic GC's pauses per generation (CPU
and wall time, from gc.callbacks; on a loaded host the wall time also holds waiting for a core), the
peak number of open sockets of the client process (/proc/self/fd), its peak RSS, and the episodes
cut off by the budget or failed. RLIMIT_NOFILE's soft limit is raised to the hard one in both processes.

    python benchmarks/concurrency.py serve --port 8000 --delay 0.5   # the server alone
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

REPLY = json.dumps(
    {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "model": "loopback",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "50"}, "finish_reason": "stop"}],
    }
).encode()
"""Every completion: guess 50 (guess-number then answers "higher" or "lower" until its turns run out)."""


GC_POLICIES = ("default", "batch")
"""CPython's GC settings as they are, or envhub.rollout.gc_policy.batch_gc() around the batch."""


ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(REPLY) + REPLY
)


class Served:
    """The server's own service time per completion (the request read to the answer written), since the
    last clear, and its CPU time then: the figures the client's are set against."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.cpu_at_clear = cpu_seconds()

    def report(self, clear: bool) -> bytes:
        body = json.dumps(
            {
                "requests": len(self.seconds),
                "p50_s": percentile(self.seconds, 50),
                "p99_s": percentile(self.seconds, 99),
                "cpu_s": cpu_seconds() - self.cpu_at_clear,
            }
        ).encode()
        if clear:
            self.seconds.clear()
            self.cpu_at_clear = cpu_seconds()
        return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body) + body


class ChatProtocol(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: each request (headers, then `content-length` bytes of body)
    is answered with ANSWER after `delay` seconds, as a model would; `.../stats` answers Served's report
    at once (POST also clears it).

    Raw asyncio, not uvicorn: its pure-Python HTTP parser (h11; httptools is not installed) cost about
    1 ms a request, which on two cores made the server, not the client, what the benchmark measured.
    """

    def __init__(self, delay: float, served: Served) -> None:
        self.delay, self.served = delay, served
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].decode("latin-1").lower()
            length = next(
                (int(line[15:]) for line in head.split("\r\n") if line.startswith("content-length:")), 0
            )
            if len(self.buffer) < end + 4 + length:
                return  # the rest of the body is still on its way
            del self.buffer[: end + 4 + length]
            method, path = head.split(" ", 2)[:2]
            if path.endswith("/stats"):
                self.write(self.served.report(clear=method == "post"))
            else:
                asyncio.get_running_loop().call_later(self.delay, self.answer, time.perf_counter())

    def answer(self, started: float) -> None:
        self.write(ANSWER)
        self.served.seconds.append(time.perf_counter() - started)

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)


def cpu_seconds() -> float:
    """CPU time this process has used, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def raise_open_files_limit() -> int:
    """Raise this process's RLIMIT_NOFILE soft limit to its hard limit (each connection is one fd)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def serve(host: str, port: int, delay: float, backlog: int) -> None:
    """Run the loopback server in this process; prints `listening on PORT` once it accepts."""
    raise_open_files_limit()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    served = Served()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: ChatProtocol(delay, served), sock=sock, backlog=backlog)
        print(f"listening on {sock.getsockname()[1]}", flush=True)
        await server.serve_forever()

    asyncio.run(run())


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


class GcPauses:
    """Every cyclic-GC pause of this process, per generation (from `gc.callbacks`), in wall and CPU time.

    The CPU time is what the collector itself cost; on a loaded host the wall time also holds the time
    the process waited for a core, which is still time no turn could finish.
    """

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.cpu = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self.longest = 0.0
        self._started = (0.0, 0.0)

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        now = (time.perf_counter(), time.process_time())
        if phase == "start":
            self._started = now
            return
        pause, generation = now[0] - self._started[0], info["generation"]
        self.seconds[generation] += pause
        self.cpu[generation] += now[1] - self._started[1]
        self.count[generation] += 1
        self.longest = max(self.longest, pause)

    def __enter__(self) -> GcPauses:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


class Clock:
    """When each completion came back, and how late the event loop woke: the two faces of a stall."""

    def __init__(self) -> None:
        self.completions: list[float] = []
        self.peak_sockets = 0
        self.loop_lag = 0.0

    async def watch(self, every: float = 0.25) -> None:
        """Sample the open sockets and the event loop's lateness until cancelled."""
        while True:
            self.peak_sockets = max(self.peak_sockets, open_sockets())
            asked = time.perf_counter()
            await asyncio.sleep(every)
            self.loop_lag = max(self.loop_lag, time.perf_counter() - asked - every)

    def longest_gap(self, started: float | None = None) -> float:
        """The longest time without a completion, from `started` (else the first one) to the last one."""
        times = sorted(self.completions) if started is None else [started, *sorted(self.completions)]
        return max((b - a for a, b in itertools.pairwise(times)), default=float("nan"))


def timed_policy(base_url: str, clock: Clock, max_connections: int) -> Any:
    """An OpenAIPolicy that notes on `clock` when each of its completions (every episode's) came back."""
    from envhub.policies.openai import OpenAIPolicy

    class Timed(OpenAIPolicy):
        async def act(self, messages: list[Any], tools: list[Any]) -> Any:
            generation = await super().act(messages, tools)
            clock.completions.append(time.perf_counter())
            return generation

    return Timed(
        base_url,
        "loopback",
        logprobs=False,
        max_tokens=8,
        timeout=120.0,
        max_connections=max_connections,
    )


def server_stats(base_url: str, *, clear: bool = False) -> dict[str, Any]:
    """The loopback server's own service times since they were last cleared (POST clears them)."""
    import httpx

    answer = httpx.request("POST" if clear else "GET", f"{base_url}/stats", timeout=30)
    return dict(answer.json())


async def play_level(
    base_url: str, level: int, *, budget: float, turns: int, max_connections: int | None, gc_policy: str
) -> dict[str, Any]:
    """Play `level` episodes at concurrency `level`; what the runner and the process did."""
    from envhub.rollout import RolloutLimits, run_batch

    clock = Clock()
    policy = timed_policy(base_url, clock, max_connections or level)
    watcher = asyncio.create_task(clock.watch())
    limits = RolloutLimits(concurrency=level, time_budget=budget, retries=0)
    started, cpu = time.perf_counter(), cpu_seconds()
    with GcPauses() as pauses, batch_gc(gc_policy):
        try:
            result = await run_batch(
                "guess-number-v0",
                policy,
                episodes=level,
                limits=limits,
                env_kwargs={"low": 1, "high": 10**9, "max_turns": turns},
            )
        finally:
            wall, cpu = time.perf_counter() - started, cpu_seconds() - cpu
            watcher.cancel()
            await policy.close()
    latencies = [float(t.info["policy_seconds"]) for e in result.episodes for t in e.turns]
    errors: dict[str, int] = {}
    for episode in result.episodes:
        if episode.error is not None:
            key = f"{episode.error.kind}: {episode.error.message[:120]}"
            errors[key] = errors.get(key, 0) + 1
    finished = sum(e.error is None and (e.terminated or e.truncated) for e in result.episodes)
    cut_off = sum(e.error is not None and e.error.kind == "cutoff" for e in result.episodes)
    return {
        "level": level,
        "gc": gc_policy,
        "max_connections": policy._http.max_connections,
        "episodes": level,
        "finished": finished,
        "cut_off": cut_off,
        "not_started": len(result.not_started),
        "steps": len(latencies),
        "wall_s": round(wall, 2),
        "steps_per_s": round(len(latencies) / wall, 1),
        "p50_step_s": round(percentile(latencies, 50), 3),
        "p99_step_s": round(percentile(latencies, 99), 3),
        "client_cpu_ms_per_step": round(1000 * cpu / max(len(latencies), 1), 2),
        "first_step_s": round(min(clock.completions, default=float("nan")) - started, 3),
        "longest_gap_s": round(clock.longest_gap(started), 3),
        "longest_gap_after_first_s": round(clock.longest_gap(), 3),
        "loop_lag_s": round(clock.loop_lag, 3),
        "gc_s": [round(s, 2) for s in pauses.seconds],
        "gc_cpu_s": [round(s, 2) for s in pauses.cpu],
        "client_cpu_s": round(cpu, 1),
        "gc_count": pauses.count,
        "gc_longest_s": round(pauses.longest, 3),
        "peak_sockets": clock.peak_sockets,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "errors": errors,
    }


@contextlib.contextmanager
def batch_gc(name: str) -> Iterator[None]:
    """The GC policy a level runs under: CPython's defaults, or envhub's for batches."""
    if name == "default":
        yield
        return
    from envhub.rollout.gc_policy import batch_gc as envhub_batch_gc

    with envhub_batch_gc():
        yield


def run_level(args: argparse.Namespace) -> None:
    """One level in this process (so its peak RSS is its own); prints one JSON line."""
    limit = raise_open_files_limit()
    server_stats(args.base_url, clear=True)
    row = asyncio.run(
        play_level(
            args.base_url,
            args.level,
            budget=args.budget,
            turns=args.turns,
            max_connections=args.max_connections,
            gc_policy=args.gc,
        )
    )
    served = server_stats(args.base_url)
    row["server_p50_s"], row["server_p99_s"] = round(served["p50_s"], 3), round(served["p99_s"], 3)
    row["server_cpu_ms_per_request"] = round(1000 * served["cpu_s"] / max(served["requests"], 1), 2)
    row["nofile"] = limit
    print(json.dumps(row), flush=True)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table, for docs/benchmarks.md."""
    columns = [
        ("concurrent episodes", "level"),
        ("GC policy", "gc"),
        ("pool", "max_connections"),
        ("finished", "finished"),
        ("steps", "steps"),
        ("wall s", "wall_s"),
        ("steps/s", "steps_per_s"),
        ("p50 step s", "p50_step_s"),
        ("p99 step s", "p99_step_s"),
        ("server p50/p99 s", "server"),
        ("CPU ms/step client/server", "cpu"),
        ("first step s", "first_step_s"),
        ("longest gap s (after the first step)", "gaps"),
        ("loop lag s", "loop_lag_s"),
        ("client CPU s", "client_cpu_s"),
        ("GC CPU s (gen 0/1/2)", "gc_cpu"),
        ("GC wall s", "gc_wall"),
        ("gen-2 runs", "gen2"),
        ("longest GC s", "gc_longest_s"),
        ("peak sockets", "peak_sockets"),
        ("peak RSS MiB", "peak_rss_mib"),
        ("cut off", "cut_off"),
        ("failed", "failed"),
    ]
    lines = ["| " + " | ".join(c for c, _ in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        row = {
            **row,
            "failed": sum(row["errors"].values()) - row["cut_off"],
            "cpu": f"{row['client_cpu_ms_per_step']}/{row['server_cpu_ms_per_request']}",
            "server": f"{row['server_p50_s']}/{row['server_p99_s']}",
            "gc_cpu": "/".join(str(s) for s in row["gc_cpu_s"]),
            "gc_wall": round(sum(row["gc_s"]), 1),
            "gaps": f"{row['longest_gap_s']} ({row['longest_gap_after_first_s']})",
            "gen2": row["gc_count"][2],
        }
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
    level.add_argument("--gc", choices=GC_POLICIES, default="batch")
    parser.add_argument("--levels", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--delay", type=float, default=0.5, help="the model's seconds per completion")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per level at most")
    parser.add_argument("--turns", type=int, default=3, help="turns per episode")
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="OpenAIPolicy(max_connections=...) (default: one per concurrent episode, at most 1024)",
    )
    parser.add_argument(
        "--gc",
        nargs="+",
        choices=GC_POLICIES,
        default=list(GC_POLICIES),
        help="GC policies to run each level under, one after the other (default: both, before and after)",
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
            for gc_policy in args.gc:
                command = [sys.executable, __file__, "level", "--base-url", loopback.base_url]
                command += ["--level", str(n), "--budget", str(args.budget), "--turns", str(args.turns)]
                command += ["--max-connections", str(args.max_connections or min(n, 1024)), "--gc", gc_policy]
                out = subprocess.run(command, capture_output=True, text=True, timeout=args.budget + 180)
                if out.returncode != 0:
                    raise SystemExit(f"level {n} failed:\n{out.stderr[-3000:]}")
                row = json.loads(out.stdout.strip().splitlines()[-1])
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\nguess-number-v0, {args.turns} turns per episode, model delay {args.delay} s:\n")
    print(table(rows))


if __name__ == "__main__":
    main()
