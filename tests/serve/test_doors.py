"""`envhub serve` under hostile sockets, on loopback against the real server process (real uvicorn).

The hostile sockets come from another loopback address (127.0.0.2) than the authorised client
(127.0.0.1), as another host's would, and the server runs with a descriptor limit of 256, as in the
issue that found the doors open: pre-auth 60 MiB frames, idle sockets, half-sent headers and websockets
that never authenticate. The bounds are generous and are bounds, not speed claims: an authorised client
opens its session within `OPEN_BOUND` seconds, the server's peak memory grows less than `MEMORY_BOUND`
bytes, and every hostile socket it admitted is cut within `CUT_BOUND` seconds (its deadlines are 2 s
here). Figures for the same attack, before and after, are in docs/benchmarks.md
(benchmarks/serve_doors.py).
"""

from __future__ import annotations

import asyncio
import base64
import os
import resource
import struct
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from envhub.serve.client import RemoteEnv
from tests.serve.test_serve import TOKEN, Server

HOSTILE = "127.0.0.2"
OPEN_BOUND = 30.0
CUT_BOUND = 30.0
MEMORY_BOUND = 64 * 2**20
FRAME = 60 * 2**20


def limited_descriptors(limit: int = 256) -> None:
    """Run in the server's child before exec: the descriptor limit the issue's server had."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


def memory(pid: int) -> dict[str, int]:
    """The process's resident and peak resident memory in bytes (/proc/PID/status)."""
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return {key: int(fields[key].split()[0]) * 1024 for key in ("VmRSS", "VmHWM")}


def upgrade(path: str, headers: str = "") -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{headers}\r\n"
    ).encode()


def text_frame_header(length: int) -> bytes:
    """A client's text frame header announcing `length` bytes, masked with a zero key (payload as is)."""
    return bytes([0x81, 0x80 | 127]) + struct.pack("!Q", length) + b"\0\0\0\0"


@dataclass
class Attack:
    """Hostile sockets held open from `HOSTILE`; `cut()` waits until the server has closed each one."""

    port: int
    sockets: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = field(default_factory=list)

    async def connect(self, data: bytes = b"") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port, local_addr=(HOSTILE, 0))
        if data:
            writer.write(data)
        self.sockets.append((reader, writer))
        return reader, writer

    async def idle(self, n: int) -> None:
        for _ in range(n):
            await self.connect()

    async def half_headers(self, n: int) -> None:
        for _ in range(n):
            await self.connect(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")

    async def unauthenticated_websockets(self, n: int, paths: list[str]) -> None:
        """Websockets without the token that then say nothing (the first path that upgrades)."""
        await asyncio.gather(*(self.upgraded(paths) for _ in range(n)))

    async def large_frames(self, n: int, paths: list[str]) -> None:
        """Websockets without the token, each sending a 60 MiB first frame (all at once)."""
        await asyncio.gather(*(self._large_frame(paths) for _ in range(n)))

    async def upgraded(self, paths: list[str]) -> asyncio.StreamWriter | None:
        for path in paths:
            reader, writer = await self.connect(upgrade(path))
            try:
                answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
                continue
            if answer.startswith(b"HTTP/1.1 101"):
                return writer
        return None

    async def _large_frame(self, paths: list[str]) -> None:
        writer = await self.upgraded(paths)
        if writer is None:
            return
        chunk = b"a" * 2**20
        try:
            writer.write(text_frame_header(FRAME))
            for _ in range(FRAME // len(chunk)):
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass  # the server cut the frame off: what the doors are for

    async def cut(self, bound: float) -> int:
        """How many of the sockets the server has not closed within `bound` seconds."""

        async def closed(reader: asyncio.StreamReader) -> bool:
            try:
                while await reader.read(2**16):
                    pass
            except ConnectionError:
                pass
            return True

        waits = [asyncio.wait_for(closed(reader), bound) for reader, _ in self.sockets]
        results = await asyncio.gather(*waits, return_exceptions=True)
        return sum(1 for result in results if result is not True)

    def close(self) -> None:
        for _, writer in self.sockets:
            writer.transport.abort()


@pytest.fixture
def doors_server() -> Iterator[Server]:
    """Behind a token, two sessions at most, 2 s deadlines, 256 descriptors."""
    args = ("--token", TOKEN, "--max-sessions", "2", "--header-timeout", "2", "--open-timeout", "2")
    server = Server(*args, preexec=limited_descriptors)
    yield server
    server.stop()


async def test_hostile_sockets_lock_no_authorised_client_out_nor_bloat_memory(
    doors_server: Server,
) -> None:
    """From one hostile address: 4 pre-auth 60 MiB frames, 150 idle sockets, 100 half-sent headers and
    20 websockets that never authenticate, more sockets than the server has descriptors. The
    authorised client still opens a session and plays; the server's peak memory stays bounded; every
    hostile socket is closed: refused at the door, or cut at its deadline."""
    port = int(doors_server.base.rpartition(":")[2])
    pid = doors_server.process.pid
    warm = RemoteEnv(f"{doors_server.base}/guess-number", token=TOKEN)
    await warm.reset(seed=0)  # the server's own memory at work, before the attack
    await warm.close()
    before = memory(pid)
    attack = Attack(port)
    try:
        sessions = ["/guess-number-v0", "/openenv/guess-number-v0/ws"]
        await attack.large_frames(4, sessions)
        await attack.idle(150)
        await attack.half_headers(100)
        await attack.unauthenticated_websockets(20, sessions)
        after = memory(pid)

        env = RemoteEnv(f"{doors_server.base}/guess-number", token=TOKEN)
        observation, _ = await asyncio.wait_for(env.reset(seed=1), OPEN_BOUND)
        assert observation[0].text.startswith("I am thinking of an integer")
        result = await env.step("50")
        assert result.observation[0].text in ("higher", "lower", "correct")
        await env.close()

        growth = after["VmHWM"] - before["VmRSS"]
        assert growth < MEMORY_BOUND, f"the server's peak memory grew {growth / 2**20:.0f} MiB"
        assert await attack.cut(CUT_BOUND) == 0
    finally:
        attack.close()
    metrics = httpx.get(f"{doors_server.http}/metrics").json()  # noqa: ASYNC210
    assert metrics["refused_connections"] > 0 and metrics["header_timeouts"] > 0
    assert metrics["refused_auth"] >= 4


async def test_without_a_token_a_session_must_open_soon_and_small() -> None:
    """No token set: a websocket is unauthorised until its `open`, so a 60 MiB first frame is cut at its
    header and a socket that never opens is closed after --open-timeout; a real client plays on."""
    server = Server("--open-timeout", "2")
    port = int(server.base.rpartition(":")[2])
    attack = Attack(port)
    try:
        before = memory(server.process.pid)
        await attack.large_frames(4, ["/guess-number-v0"])
        await attack.unauthenticated_websockets(10, ["/guess-number-v0", "/openenv/guess-number-v0/ws"])
        growth = memory(server.process.pid)["VmHWM"] - before["VmRSS"]
        assert growth < MEMORY_BOUND, f"the server's peak memory grew {growth / 2**20:.0f} MiB"
        env = RemoteEnv(f"{server.base}/guess-number")
        await asyncio.wait_for(env.reset(seed=1), OPEN_BOUND)
        await env.step("50")
        await env.close()
        assert await attack.cut(CUT_BOUND) == 0
        metrics = httpx.get(f"{server.http}/metrics").json()  # noqa: ASYNC210
        assert metrics["open_timeouts"] >= 10
    finally:
        attack.close()
        server.stop()


def test_the_limits_are_options_and_refuse_nonsense() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "envhub", "serve", "guess-number", "--header-timeout", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "--header-timeout must be positive" in result.stdout + result.stderr
