"""The host's end of a local sandbox's exec server (`exec_server.py`, which runs inside the sandbox): one
round trip per command instead of one bubblewrap.

Setting up a sandbox's namespaces costs tens of milliseconds, a fork less than one. So a local sandbox
starts one long-lived process inside its namespaces, the exec server (`exec_server.py`, run by the
sandbox's own `python3` as the pid namespace's init), and each `exec` becomes a request to it: the host
makes the command's pipes, sends their far ends over a unix socket, and the server spawns the command
with them, waits for it (killing it at its deadline), kills whatever it left running, reaps everything
and answers with the exit status. The host reads the output from its own ends of the pipes, with the
same cap and the same drain-and-drop as a command started by bubblewrap; the server never sees a byte
of it, so nothing the command prints can reach the protocol.

The server serves one command at a time; `LocalSandbox` gives a concurrent command a bubblewrap of its
own, as before. Whenever the server cannot answer (it died, wedged, or sent nonsense) the host kills
it and the next command starts a fresh one: the command in flight gets an honest result (timed out,
killed for memory) or a SandboxError, never a made-up one.
"""

from __future__ import annotations

import array
import asyncio
import functools
import importlib.util
import json
import marshal
import os
import socket
import struct
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from envhub.sandbox.cleanup import finish
from envhub.sandbox.results import SandboxError

SOURCE = (Path(__file__).parent / "exec_server.py").read_bytes()
BOOTSTRAP = [
    "python3",
    "-I",
    "-S",
    "-c",
    "import sys, marshal; source, _, code = sys.stdin.buffer.read().partition(b'\\0'); "
    "exec(marshal.loads(code[4:]) if code[:4] == sys.modules['_frozen_importlib_external'].MAGIC_NUMBER "
    "else source)",
]
"""How the server starts: the sandbox's own python3 reads the server from its stdin (no bind mount, and
no process listing in the sandbox shows it): its source, a NUL, then the code compiled here, marked
with this interpreter's bytecode magic. A python3 of the same bytecode runs that code, as it would a
.pyc, and skips compiling the source (3-4 ms of CPU at each start); any other compiles the source."""
START_TIMEOUT_S = 30.0
KILL_GRACE_S = 5.0
"""What the server allows SIGKILLed processes to die in; the host waits that long again, plus a second."""
HEADER = struct.Struct("!I")
MAX_REPLY = 1 << 16
FS_ENCODING = sys.getfilesystemencoding()
"""How a request's strings become bytes: os.fsencode's encoding (with surrogateescape, as it does)."""


class ServerStartError(SandboxError):
    """The exec server did not start in this sandbox (no python3 in it, say); commands run as before."""


class Capture:
    """One output stream of a command: the first `cap` bytes, kept even if reading is cut short."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.cut = False

    def add(self, chunk: bytes) -> None:
        """Keep what fits under the cap; the rest is dropped, and the capture says it was cut."""
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        if len(chunk) > room:
            self.cut = True

    async def read(self, stream: asyncio.StreamReader) -> None:
        """Read to EOF, draining past the cap so the writer never blocks."""
        while chunk := await stream.read(65536):
            self.add(chunk)

    @property
    def data(self) -> bytes:
        return bytes(self.kept)


@dataclass(frozen=True)
class Outcome:
    """What the server said about one command, with its output as the host read it."""

    exit_code: int
    timed_out: bool
    stdout: bytes
    stderr: bytes
    truncated: bool
    lost: bool = False
    """The server died while the command ran (killed for memory, most likely): the command died with it."""


class Exchange:
    """One command's traffic (its two output pipes and the server's reply), read by the event loop's
    readiness callbacks as it arrives.

    Why callbacks rather than a task per stream and `wait_for` around the reply (as before): those cost
    the host more CPU than the server's whole part in a short command (a `true` is under a millisecond,
    and every task, wait and gather is tens of microseconds of the loop's bookkeeping).
    """

    def __init__(self, sock: socket.socket, streams: dict[int, Capture]) -> None:
        self._loop = asyncio.get_running_loop()
        self._sock = sock
        self._sock_fd = sock.fileno()
        self._open = dict(streams)
        self._received = bytearray()
        self._answered = False
        self._waiter: tuple[asyncio.Future[None], Callable[[], bool]] | None = None
        self.reply: dict[str, Any] | None = None
        """The server's answer; None if it hung up before one."""
        self.garbled: Exception | None = None
        """What was wrong with an answer that was not a small JSON object (or a failed read)."""
        for fd in streams:
            self._loop.add_reader(fd, self._read_stream, fd)
        self._loop.add_reader(self._sock_fd, self._read_reply)

    def answered(self) -> bool:
        return self._answered

    def drained(self) -> bool:
        return not self._open

    async def until(self, condition: Callable[[], bool], timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until `condition` holds or `timeout` passes; whether it holds."""
        if condition():
            return True
        waiter = self._loop.create_future()
        self._waiter = (waiter, condition)
        timer = self._loop.call_later(timeout, resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None
        return condition()

    def close(self) -> None:
        """Stop reading: before the caller closes the descriptors or the server's socket. Idempotent."""
        for fd in self._open:
            self._loop.remove_reader(fd)
        self._open.clear()
        self.close_reply()

    def close_reply(self) -> None:
        """Stop reading the socket (before the server is stopped), still reading the pipes."""
        if not self._answered:
            self._answered = True
            self._loop.remove_reader(self._sock_fd)

    def _read_stream(self, fd: int) -> None:
        """Read what the pipe holds, draining past the cap so the writer never blocks."""
        capture = self._open[fd]
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return
            if not chunk:
                self._loop.remove_reader(fd)
                del self._open[fd]
                self._changed()
                return
            capture.add(chunk)

    def _read_reply(self) -> None:
        try:
            chunk = self._sock.recv(MAX_REPLY + HEADER.size)
        except BlockingIOError:
            return
        except OSError as exc:
            self._answer(None, exc)
            return
        if not chunk:
            self._answer(None)  # the server is gone
            return
        self._received += chunk
        if len(self._received) < HEADER.size:
            return
        (size,) = HEADER.unpack_from(self._received)
        if size > MAX_REPLY:
            self._answer(None, ValueError(f"a {size}-byte reply from the exec server"))
        elif len(self._received) > HEADER.size + size:
            self._answer(None, ValueError("the exec server sent more than one reply"))
        elif len(self._received) == HEADER.size + size:
            try:
                reply = json.loads(self._received[HEADER.size :])
            except ValueError as exc:
                self._answer(None, exc)
                return
            if isinstance(reply, dict):
                self._answer(reply)
            else:
                self._answer(None, ValueError("a reply from the exec server that is not a JSON object"))

    def _answer(self, reply: dict[str, Any] | None, garbled: Exception | None = None) -> None:
        self.close_reply()
        self.reply, self.garbled = reply, garbled
        self._changed()

    def _changed(self) -> None:
        if self._waiter is not None and self._waiter[1]():
            resolve(self._waiter[0])


class Started(Protocol):
    """The server's process, as far as anyone asks: its pid, and whether it has exited."""

    pid: int

    @property
    def returncode(self) -> int | None: ...


class ExecServer:
    """A running exec server. `run` calls must not overlap (the caller serialises them)."""

    def __init__(self, proc: Started, sock: socket.socket, kill: Callable[[], Awaitable[None]]) -> None:
        self._proc = proc
        self._sock = sock
        self._kill = kill
        self._dead = False
        sock.setblocking(False)

    @property
    def alive(self) -> bool:
        return not self._dead and self._proc.returncode is None

    async def start(self, *, source: int | None, errors: int) -> None:
        """Send the Python server its source (on `source`, its stdin; None for the C server, which needs
        none) and wait for the server's first word.

        ServerStartError if it never comes, with what the server wrote on `errors` (its stderr).
        Both pipe ends are ours: closed here.
        """
        said = Capture(MAX_REPLY)
        feeding = [] if source is None else [source]
        for fd in (*feeding, errors):
            os.set_blocking(fd, False)
        tasks = [asyncio.create_task(_drain(errors, said))]
        if feeding:
            tasks.append(asyncio.create_task(_feed(feeding, payload())))
        reply: dict[str, Any] | None = None
        try:
            try:
                reply = await asyncio.wait_for(self._receive(), START_TIMEOUT_S)
            except (TimeoutError, OSError, ValueError) as exc:
                reply = {"error": str(exc) or type(exc).__name__}
            if not _says_ready(reply):
                await self.stop()  # its stderr reaches EOF once it is gone: then all it said is read
                await asyncio.wait(tasks[:1], timeout=1.0)
        except BaseException:
            await finish(self.stop())
            raise
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for fd in [*feeding, errors]:
                os.close(fd)
        if not _says_ready(reply):
            detail = said.data.decode(errors="replace").strip()
            raise ServerStartError(
                f"the exec server did not start in the sandbox: {detail or reply or 'it exited at once'}"
            )

    async def run(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        timeout: float,  # noqa: ASYNC109 - the command's own limit, enforced by the server
        stdin: bytes | None,
        cap: int,
    ) -> Outcome:
        """Run one command to completion (or its deadline). SandboxError if the server refused it."""
        request = encode_request(argv, env, cwd, timeout)
        out, err = Capture(cap), Capture(cap)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ours, theirs, feeding = [out_r, err_r], [out_w, err_w], []
        if stdin is not None:
            in_r, in_w = os.pipe()
            feeding.append(in_w)  # the feeder closes it when done: that is the command's EOF
            theirs.append(in_r)
        exchange: Exchange | None = None
        feeder: asyncio.Task[None] | None = None
        try:
            try:
                await self._send(request, theirs)
            finally:
                for fd in theirs:
                    os.close(fd)  # the command's copies are the only ones: its pipes end with it
                theirs = []
            # Set up while the server spawns the command: readiness is level-triggered, so nothing the
            # command writes or the server answers before the readers are in place is missed.
            for fd in ours + feeding:
                os.set_blocking(fd, False)
            exchange = Exchange(self._sock, {out_r: out, err_r: err})
            if stdin is not None:
                # Fed alongside the wait: a command that never reads its stdin must not stall the host.
                feeder = asyncio.create_task(_feed(feeding, stdin))
            reply: dict[str, Any] | None = {"wedged": True}  # unless the server answers in time
            if await exchange.until(exchange.answered, timeout + 2 * KILL_GRACE_S + 1):
                reply = exchange.reply
            if reply is None or "wedged" in reply or exchange.garbled is not None:
                exchange.close_reply()
                await self.stop()  # with the server goes its pid namespace: the pipes reach EOF
            all_read = await exchange.until(exchange.drained, KILL_GRACE_S)
        except BaseException:
            if exchange is not None:
                exchange.close()
            await asyncio.shield(self.stop())  # cancelled mid-command: the protocol is out of step
            raise
        finally:
            if exchange is not None:
                exchange.close()
            if feeder is not None:
                feeder.cancel()
                await asyncio.gather(feeder, return_exceptions=True)
            for fd in ours + theirs + feeding:
                os.close(fd)
        truncated = out.cut or err.cut or not all_read
        if exchange.garbled is not None:
            reply = {"error": f"{type(exchange.garbled).__name__}: {exchange.garbled}"}
        if reply is None:
            return Outcome(-1, False, out.data, err.data, truncated, lost=True)
        if "wedged" in reply:
            return Outcome(-1, True, out.data, err.data, truncated)
        if "error" in reply or not isinstance(reply.get("exit_code"), int):
            await self.stop()
            what = reply.get("error", reply)
            raise SandboxError(f"the sandbox's exec server could not run the command: {what}")
        if reply.get("retire"):
            await self.stop()  # it has used half its CPU budget and exits; the next command starts another
        return Outcome(reply["exit_code"], reply.get("timed_out") is True, out.data, err.data, truncated)

    async def stop(self) -> None:
        """Kill the server and its pid namespace; safe to call twice."""
        if self._dead:
            return
        self.hang_up()
        await self._kill()

    def hang_up(self) -> None:
        """Close our end without waiting: the server kills what it runs and exits when it sees it."""
        self._dead = True
        self._sock.close()

    async def _send(self, data: bytes, fds: list[int]) -> None:
        """The request with the command's pipe ends attached to its first bytes (SCM_RIGHTS)."""
        loop = asyncio.get_running_loop()
        payload = HEADER.pack(len(data)) + data
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        while True:
            try:
                sent = self._sock.sendmsg([payload], rights)
                break
            except BlockingIOError:
                await _ready(loop.add_writer, loop.remove_writer, self._sock.fileno())
        if sent < len(payload):
            await loop.sock_sendall(self._sock, payload[sent:])

    async def _receive(self) -> dict[str, Any] | None:
        """One reply; None at EOF (the server is gone). ValueError for anything but a small JSON object."""
        header = await self._read_exactly(HEADER.size)
        if header is None:
            return None
        (size,) = HEADER.unpack(header)
        if size > MAX_REPLY:
            raise ValueError(f"a {size}-byte reply from the exec server")
        body = await self._read_exactly(size)
        if body is None:
            return None
        reply = json.loads(body)
        if not isinstance(reply, dict):
            raise ValueError("a reply from the exec server that is not a JSON object")
        return reply

    async def _read_exactly(self, n: int) -> bytes | None:
        loop = asyncio.get_running_loop()
        data = b""
        while len(data) < n:
            chunk = await loop.sock_recv(self._sock, n - len(data))
            if not chunk:
                return None
            data += chunk
        return data


def encode_request(argv: list[str], env: Mapping[str, str], cwd: str, timeout: float) -> bytes:
    """A request's body: fields each ended by a NUL (the timeout, the cwd, the argument count, the
    arguments, then KEY=VALUE entries), which a server in C reads as easily as one in Python.

    SandboxError for what no exec could carry (a NUL in any string, `=` in a variable's name), said
    here rather than by a command that fails to start."""
    fields = [repr(max(0.0, timeout)), cwd, str(len(argv)), *argv]
    fields += [f"{key}={value}" for key, value in env.items()]
    for key in env:
        if not key or "=" in key:
            raise SandboxError(
                f"environment variable name {key!r} is not valid: a name is non-empty, without '='"
            )
    joined = "\0".join(fields) + "\0"
    if joined.count("\0") != len(fields):  # one NUL per field: any more was inside one
        raise SandboxError("a command's arguments, environment and cwd cannot contain a NUL byte")
    return joined.encode(FS_ENCODING, "surrogateescape")  # as os.fsencode does, in one call, not one a field


async def _ready(add: Callable[..., Any], remove: Callable[[int], Any], fd: int) -> None:
    """Wait until `fd` is readable or writable (as `add` is the loop's add_reader or add_writer)."""
    waiter = asyncio.get_running_loop().create_future()
    add(fd, resolve, waiter)
    try:
        await waiter
    finally:
        remove(fd)


@functools.cache
def payload() -> bytes:
    """What the server is started with on its stdin (see BOOTSTRAP); made once per process."""
    code = compile(SOURCE, "<envhub exec server>", "exec", dont_inherit=True)
    return SOURCE + b"\0" + importlib.util.MAGIC_NUMBER + marshal.dumps(code)


def _says_ready(reply: dict[str, Any] | None) -> bool:
    return reply is not None and reply.get("ready") is True


def resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _drain(fd: int, capture: Capture) -> None:
    """Read a non-blocking pipe to EOF into `capture` (the caller closes the fd)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            await _ready(loop.add_reader, loop.remove_reader, fd)
            continue
        if not chunk:
            return
        capture.add(chunk)


async def _feed(holder: list[int], data: bytes) -> None:
    """Write a command's stdin to the non-blocking pipe in `holder`, then close it (the command's EOF).

    The fd is taken out of `holder` as it is closed, so the caller closes it only if this never ran.
    """
    loop = asyncio.get_running_loop()
    fd = holder[0]
    view = memoryview(data)
    try:
        while view:
            try:
                view = view[os.write(fd, view[:65536]) :]
            except BlockingIOError:
                await _ready(loop.add_writer, loop.remove_writer, fd)
    except (BrokenPipeError, ConnectionResetError):
        return
    finally:
        holder.clear()
        os.close(fd)
