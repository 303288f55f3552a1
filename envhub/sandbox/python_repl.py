"""The Python REPL of multi-turn code agents (`PythonWorker`): one sandboxed interpreter per episode,
state kept between snippets.

A snippet that runs past its timeout is interrupted inside the interpreter (SIGALRM raises in the user's
code), so the session survives; only a snippet that ignores the interrupt (stuck in C code, or catching
BaseException) is killed after a grace period, and then the session's state is lost, which the result
says.

A worker forks with its env (`Env.fork`): an interpreter's memory cannot be copied, so the child's
worker starts a new interpreter in the child's (forked) sandbox and runs again, in order, the cells the
session has run; a cell whose output comes out different (random numbers, the time, a file it appends
to, which the forked files already hold) is named in the child's `diverged`, and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

from pydantic import ValidationError

from envhub.sandbox.cleanup import finish
from envhub.sandbox.policy import IsolationPolicy
from envhub.sandbox.results import ExecResult, SandboxError

log = logging.getLogger(__name__)

_SERVER = (Path(__file__).parent / "_repl.py").read_text()
KILL_GRACE_S = 2.0
START_TIMEOUT_S = 30.0
EXIT_GRACE_S = 2.0
"""Seconds an interpreter that closed its stdout gets to exit by itself before it is killed."""


class ReplResult(ExecResult):
    """A snippet's outcome; `session_lost` says the interpreter was killed and its state is gone."""

    session_lost: bool = False


@dataclass(frozen=True)
class Cell:
    """A snippet the session ran, with its limit and what it printed: what a fork runs again."""

    code: str
    timeout: float
    result: ReplResult

    def differs(self, replayed: ReplResult) -> str | None:
        """Why a replay's result is not this cell's (its output, status or timeout), or None."""
        for field in ("exit_code", "timed_out", "stdout", "stderr"):
            before, after = getattr(self.result, field), getattr(replayed, field)
            if before != after:
                return f"{field} {_short(before)} became {_short(after)}"
        return None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Background(Protocol):
    """What the worker needs of its interpreter: the sandbox's background program
    (`envhub.sandbox.base.Background`, named by shape here since base imports this module)."""

    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader
    stderr: asyncio.StreamReader

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    async def kill(self) -> None: ...


class Spawner(Protocol):
    """What the worker needs of its sandbox: the policy's limits and a background program inside it.

    Named here rather than taken as `Sandbox`, since `Sandbox.python()` builds the worker: the sandbox
    module imports this one, and this one needs nothing of it.
    """

    policy: IsolationPolicy

    async def start_background(
        self, command: list[str], *, env: Mapping[str, str] | None = None
    ) -> Background: ...


class PythonWorker:
    """A live interpreter in a sandbox. Get one with `await sandbox.python()`.

    `run` calls are serialised; after a lost session the next `run` starts a fresh interpreter.
    """

    def __init__(self, sandbox: Spawner, *, python: str = "python3") -> None:
        self._sandbox = sandbox
        self._python = python
        self._proc: Background | None = None
        self._lock = asyncio.Lock()
        self._stderr_task: asyncio.Task[bytes] | None = None
        self.restarts = 0
        """Interpreters started after the first: each one lost the state before it."""
        self.cells: list[Cell] = []
        """The cells the current interpreter has run, in order: its state is what they made."""
        self.diverged: list[int] = []
        """For a forked worker: the cells (indices into `cells`) whose output differed when replayed."""

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> None:
        cap = self._sandbox.policy.max_output_bytes
        proc = await self._sandbox.start_background([self._python, "-I", "-u", "-c", _SERVER, str(cap)])
        self._proc = proc
        assert proc.stderr is not None and proc.stdout is not None
        self._stderr_task = asyncio.create_task(_tail(proc.stderr))
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if not line.startswith(b'{"ready"'):
            await self._kill()
            detail = (await self._stderr_text()).strip()
            raise SandboxError(f"the Python worker did not start in the sandbox: {detail or 'no output'}")

    async def run(
        self,
        code: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the per-call limit is the contract
    ) -> ReplResult:
        """Run a snippet in the session; the value of a final expression is printed, as in a REPL."""
        wall = self._sandbox.policy.wall_time_s
        limit = min(timeout, wall) if timeout else wall
        async with self._lock:
            if not self.alive:
                if self._proc is not None:
                    self.restarts += 1
                self.cells = []  # a new interpreter: what the old one ran is gone with it
                await self.start()
            proc = self._proc
            assert proc is not None and proc.stdin is not None and proc.stdout is not None
            loop = asyncio.get_running_loop()
            started = loop.time()
            garbled = False
            try:
                # One deadline for the whole round trip, the request's write included: an interpreter
                # that stopped reading (SIGSTOPped, wedged) leaves a large request stuck in the pipe.
                async with asyncio.timeout(limit + KILL_GRACE_S):
                    proc.stdin.write(json.dumps({"code": code, "timeout": limit}).encode() + b"\n")
                    await proc.stdin.drain()
                    line = await proc.stdout.readline()
            except TimeoutError:
                await self._kill()
                return ReplResult(
                    stdout="",
                    stderr=f"TimeoutError: the snippet ignored the interrupt after {limit} s; "
                    "the interpreter was killed and its state is lost\n",
                    exit_code=-1,
                    timed_out=True,
                    wall_time_s=loop.time() - started,
                    session_lost=True,
                )
            except (BrokenPipeError, ConnectionResetError):
                line = b""
            except ValueError:  # a reply line past the stream's limit: the snippet wrote into the protocol
                line, garbled = b"", True
            except BaseException:
                await asyncio.shield(self._kill())  # cancelled mid-call: the protocol is out of step
                raise
            reply = _parse_reply(line, loop.time() - started)
            if reply is None:
                # The interpreter died (os._exit, OOM kill, a crash) or garbled its own protocol.
                garbled = garbled or bool(line)
                if not garbled:
                    # EOF on its stdout comes before its exit is reaped; killing it now, on a busy host,
                    # would report our SIGKILL (bubblewrap says 255) instead of the status it chose.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(proc.wait(), EXIT_GRACE_S)
                await self._kill()
                exit_code = -1 if garbled or proc.returncode is None else proc.returncode
                what = (
                    "sent no readable reply (its code wrote into the protocol channel) and was killed"
                    if garbled
                    else f"exited (status {exit_code})"
                )
                return ReplResult(
                    stdout="",
                    stderr=f"the interpreter {what}; its state is lost\n" + (await self._stderr_text()),
                    exit_code=exit_code if exit_code != 0 else 1,
                    oom_killed=exit_code in (137, -9),
                    wall_time_s=loop.time() - started,
                    session_lost=True,
                )
            self.cells.append(Cell(code=code, timeout=limit, result=reply))
            return reply

    async def __fork__(self, memo: dict[int, Any]) -> PythonWorker:
        """What `Env.fork` puts in a child env where this worker was: a worker in the child's sandbox
        that has run this session's cells again (see the module's docstring), or an idle one when this
        worker has no live interpreter (its next `run` starts one, as here)."""
        sandbox = memo.get(id(self._sandbox))
        forked_here = sandbox is None
        if sandbox is None:  # the env lists the worker before its sandbox: fork the sandbox first
            fork = getattr(self._sandbox, "__fork__", None)
            if fork is None:
                raise SandboxError(f"the worker's {type(self._sandbox).__name__} cannot fork")
            sandbox = memo[id(self._sandbox)] = await fork(memo)
        child = PythonWorker(sandbox, python=self._python)
        child.restarts = self.restarts
        if not self.alive:
            return child
        try:
            await child.replay(self.cells)
        except BaseException:
            await child.close()
            if forked_here:
                del memo[id(self._sandbox)]
                with contextlib.suppress(Exception):
                    await finish(sandbox.close())
            raise
        return child

    async def replay(self, cells: list[Cell]) -> None:
        """Run `cells` again in order in this (new) session, noting in `diverged` those whose output is
        not what it was; a cell that loses the session fails the replay, as nothing after it holds."""
        for index, cell in enumerate(cells):
            result = await self.run(cell.code, timeout=cell.timeout)
            if result.session_lost:
                raise SandboxError(
                    f"replaying cell {index} of the forked session lost the interpreter "
                    f"({result.stderr.strip()[:200]}); the child cannot reach its parent's state"
                )
            why = cell.differs(result)
            if why is not None:
                self.diverged.append(index)
                log.warning("a forked Python session's cell %d gave another result: %s", index, why)

    async def _kill(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        await proc.kill()

    async def _stderr_text(self) -> str:
        if self._stderr_task is None:
            return ""
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            return (await asyncio.wait_for(asyncio.shield(self._stderr_task), 1.0)).decode(errors="replace")
        return ""

    async def close(self) -> None:
        """Stop the interpreter; the sandbox stays open."""
        await self._kill()
        if self._stderr_task is not None:
            self._stderr_task.cancel()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


def _parse_reply(line: bytes, wall_time_s: float) -> ReplResult | None:
    """The server's reply, or None for anything else (EOF, or bytes the snippet pushed into the pipe).

    The wall time is the round trip as the caller lived it, not just the time inside the interpreter.
    """
    try:
        reply = json.loads(line) if line else None
        if not isinstance(reply, dict):
            return None
        return ReplResult.model_validate({**reply, "wall_time_s": wall_time_s})
    except (json.JSONDecodeError, UnicodeDecodeError, ValidationError):
        return None


async def _tail(stream: asyncio.StreamReader, keep: int = 65536) -> bytes:
    data = b""
    while chunk := await stream.read(65536):
        data = (data + chunk)[-keep:]
    return data
