"""`tool-use-v0`: multi-step tasks solved with a calculator, a sandboxed file system, Python and search.

Every episode runs against its own sandbox (a bubblewrap `local` sandbox, wiped between episodes): the
task's input files are written into its workspace at setup, the file and Python tools act only inside
it, and a task that asks for a file is graded by reading that file back from the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import posixpath
import random
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import envhub
import envhub.sandbox
from envhub.grading.numbers import integer, last_number
from envhub.messages import Message
from envhub.sandbox import ExecResult, IsolationPolicy, PythonWorker, Sandbox
from envhub_tools.calculator import evaluate, format_number
from envhub_tools.corpus import load_corpus
from envhub_tools.tasks import KINDS, WORKDIR, Task, draw_task

POLICY = IsolationPolicy(memory_mb=256, pids=64, cpus=1.0, wall_time_s=20, disk_mb=32, max_files=2_000)
"""Small limits: the tasks need a few kilobytes of files and a few seconds of Python."""
FILE_TIMEOUT_S = 15.0
"""A file tool that takes longer is stuck, not slow: a call takes milliseconds, but a host loaded ten
times over its cores made honest calls miss a 5 s bound (`file_timeout_s` sets it per env)."""
PYTHON_TIMEOUT_S = 10.0
MAX_READ_BYTES = 64 * 1024
MAX_WRITE_BYTES = 1024 * 1024
MAX_LISTED = 200
_FILES = (Path(__file__).parent / "_files.py").read_text()
"""The file tools' in-sandbox side: each call walks its path there without following any symlink."""
_ERRORS: dict[str, type[OSError]] = {
    e.__name__: e
    for e in (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError, OSError)
}
log = logging.getLogger(__name__)


def workspace_path(path: str) -> str:
    """`path` (relative to the workspace, or absolute) as an absolute path that stays inside it.

    The sandbox already confines what the agent can reach; this keeps the tools to the workspace so
    that `/etc/shadow` or `../..` is a clear error for the agent instead of a view of the sandbox's
    read-only system files.
    """
    resolved = posixpath.normpath(posixpath.join(WORKDIR, path))
    if resolved != WORKDIR and not resolved.startswith(WORKDIR + "/"):
        raise PermissionError(f"{path} is outside the workspace; only paths under {WORKDIR} are reachable")
    return resolved


def _failed(result: ExecResult, path: str, timeout_s: float) -> OSError:
    """The error a file command's failure means, worded for the agent."""
    if result.timed_out:
        return TimeoutError(f"{path} could not be accessed within {timeout_s:g} s")
    lines = result.stderr.strip().splitlines()
    try:
        said = json.loads(lines[-1])
        return _ERRORS.get(said["error"], OSError)(said["message"])
    except (IndexError, ValueError, KeyError, TypeError):
        message = lines[-1] if lines else f"exit {result.exit_code}"
        return OSError(message.replace(WORKDIR + "/", ""))


def final_number(text: str) -> Fraction | None:
    """The last number written in an answer ("The total is 1,234." -> 1234), or None; one too long
    for any task's answer is read as huge by envhub's bounded reader, so it grades as wrong."""
    return last_number(text)


class ToolUse(envhub.ToolEnv):
    """Tasks that need several tool calls, drawn from the seed; `kind` fixes one task kind.

    Kinds: file-sum, search-compute, order-total, write-report, csv-query (see `envhub_tools.tasks`).
    """

    system_prompt = (
        "You are a careful assistant with tools: a calculator, a file system rooted at your workspace "
        f"({WORKDIR}), a Python interpreter that runs in the same workspace, and search over a document "
        "collection. Use the tools to find and compute the answer; you may call several tools at once. "
        "When you are done, reply without calling a tool."
    )

    def __init__(
        self, kind: str | None = None, *, max_turns: int | None = None, file_timeout_s: float = FILE_TIMEOUT_S
    ) -> None:
        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)} (or none for all)")
        if file_timeout_s <= 0:
            raise ValueError(f"file_timeout_s must be positive, got {file_timeout_s}")
        super().__init__(max_turns=max_turns)
        self.file_timeout_s = file_timeout_s
        self.kind = kind
        self.corpus = load_corpus()
        self._task: Task | None = None
        self._sandbox: Sandbox | None = None
        self._worker: PythonWorker | None = None
        self._worker_lock = asyncio.Lock()

    @property
    def task(self) -> Task:
        if self._task is None:
            raise envhub.EpisodeStateError("no task yet: call reset() first")
        return self._task

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None or self._sandbox.closed:
            raise envhub.EpisodeStateError("the sandbox is not open: call reset() first")
        return self._sandbox

    # -- episode lifecycle ----------------------------------------------------------------------------

    async def setup(self, rng: random.Random) -> str:
        self._task = draw_task(self.kind or rng.choice(list(KINDS)), rng, self.corpus)
        await self._empty_sandbox()
        for path, text in self._task.files.items():  # in turn: parallel writes race to make a folder
            await self.sandbox.write_file(f"{WORKDIR}/{path}", text)
        return self._task.prompt

    def reset_info(self) -> dict[str, Any]:
        # The isolation report is stored with each episode record.
        return {"kind": self.task.kind, "isolation": self.sandbox.report().model_dump(mode="json")}

    async def close(self) -> None:
        try:
            await self._stop_worker()
        finally:
            if self._sandbox is not None:
                await self._sandbox.close()
                self._sandbox = None

    async def _empty_sandbox(self) -> None:
        """One sandbox per env, emptied between episodes; replaced when emptying it fails, so whatever the
        last episode left behind (a wedged interpreter, a tree deeper than PATH_MAX), this one starts."""
        if self._sandbox is not None and not self._sandbox.closed:
            try:
                await self._stop_worker()
                await self._sandbox.reset()
                return
            except Exception as exc:
                log.warning("could not empty the sandbox (%r); opening a new one", exc)
                with contextlib.suppress(Exception):
                    await self._sandbox.close()
        self._worker = None
        self._sandbox = await envhub.sandbox.open("local", policy=POLICY)

    async def _stop_worker(self) -> None:
        if self._worker is not None:
            worker, self._worker = self._worker, None
            await worker.close()

    # -- tools ----------------------------------------------------------------------------------------

    @envhub.tool
    def calculate(self, expression: str) -> str:
        """Evaluate an arithmetic expression exactly.

        Args:
            expression: Numbers with + - * / // % ** (or ^) and parentheses, and the functions abs, min,
                max, round and sqrt; for example "(1200 + 345) * 3" or "max(4, 9) - min(4, 9)".
        """
        return format_number(evaluate(expression))

    @envhub.tool
    async def list_files(self, path: str = ".") -> list[str]:
        """List a directory of the workspace; directory names end with "/".

        Args:
            path: A directory, relative to the workspace (default: the workspace itself).
        """
        listing = json.loads(await self._file_op("list", path))
        names = sorted(name + ("/" if is_dir else "") for name, is_dir in listing)
        if len(names) > MAX_LISTED:
            return [*names[:MAX_LISTED], f"... and {len(names) - MAX_LISTED} more"]
        return names

    @envhub.tool
    async def read_file(self, path: str) -> str:
        """Read a text file of the workspace.

        Args:
            path: The file, relative to the workspace.
        """
        return (await self._read(path)).decode(errors="replace")

    @envhub.tool
    async def write_file(self, path: str, content: str) -> str:
        """Create or replace a text file in the workspace, making its directories.

        Args:
            path: The file, relative to the workspace.
            content: The text to write.
        """
        data = content.encode()
        if len(data) > MAX_WRITE_BYTES:
            raise ValueError(f"content is {len(data)} bytes; the most one write takes is {MAX_WRITE_BYTES}")
        await self._file_op("write", path, stdin=data)
        return f"wrote {len(data)} bytes to {workspace_path(path)}"

    @envhub.tool
    async def python(self, code: str) -> str:
        """Run Python in the workspace; variables persist between calls, as in a notebook.

        Args:
            code: Python source; the value of a final expression is printed.
        """
        async with self._worker_lock:  # parallel first calls must not start two interpreters
            if self._worker is None:
                self._worker = await self.sandbox.python()
            worker = self._worker
        result = await worker.run(code, timeout=PYTHON_TIMEOUT_S)
        output = result.stdout + result.stderr
        if result.timed_out:
            output += f"\n(stopped after {PYTHON_TIMEOUT_S:g} s)"
        if result.session_lost:
            output += "\n(the interpreter was restarted: earlier variables are gone)"
        return output or "(no output)"

    @envhub.tool
    def search(self, query: str, k: int = 3) -> list[dict[str, str]]:
        """Search the document collection; the best matches come first.

        Args:
            query: Words to look for, such as a name and what you want to know about it.
            k: How many documents to return, 1 to 10.
        """
        if not 1 <= k <= 10:
            raise ValueError(f"k must be between 1 and 10, got {k}")
        return [{"id": d.id, "title": d.title, "text": d.text} for d in self.corpus.search(query, k)]

    async def _file_op(self, op: str, path: str, *, stdin: bytes | None = None) -> str:
        """One file operation as one command inside the sandbox (see `_files.py`): its stdout.

        Not from the host, and not as a check followed by an access: the walk that refuses symlinks
        and special files is the walk that opens the file, so nothing the agent runs at the same time
        (its Python tool) can swap a link in between.
        """
        rel = posixpath.relpath(workspace_path(path), WORKDIR)
        argv = ["python3", "-I", "-S", "-c", _FILES, op, WORKDIR, rel, path, str(MAX_READ_BYTES + 1)]
        result = await self.sandbox.exec(argv, stdin=stdin, timeout=self.file_timeout_s)
        if not result.ok:
            raise _failed(result, path, self.file_timeout_s)
        return result.stdout

    async def _read(self, path: str) -> bytes:
        """A file's first bytes, read inside the sandbox."""
        data = (await self._file_op("read", path)).encode()
        if len(data) > MAX_READ_BYTES:
            return data[:MAX_READ_BYTES] + f"\n... (cut at {MAX_READ_BYTES} bytes)".encode()
        return data

    # -- rewards --------------------------------------------------------------------------------------

    @envhub.reward
    async def correct(self, answer: str) -> float:
        """1 for the right number: in the reply, or for file tasks in the file, read back from the sandbox."""
        task = self.task
        if task.output_file is None:
            return float(final_number(answer) == task.expected)
        try:
            written = (await self._read(task.output_file)).decode()
        except OSError:
            return 0.0
        if re.fullmatch(r"\s*-?\d+\s*", written) is None:
            return 0.0
        return float(integer(written.strip()) == task.expected)

    @envhub.reward(weight=0.0)
    def tool_calls(self, messages: list[Message]) -> float:
        """Recorded, not rewarded: how many tools the agent called."""
        return float(sum(len(m.tool_calls) for m in messages))

    @envhub.reward(weight=0.0)
    def tool_errors(self, messages: list[Message]) -> float:
        """Recorded, not rewarded: how many tool calls came back as errors."""
        return float(sum(m.role == "tool" and m.text.startswith("Error:") for m in messages))

    # -- the oracle -----------------------------------------------------------------------------------

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        results: list[list[str]] = []
        for message in messages:
            if message.role == "assistant":
                results.append([])
            elif message.role == "tool" and results:
                results[-1].append(message.text)
        return self.task.reference(results)
