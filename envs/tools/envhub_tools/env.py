"""`tool-use-v0`: multi-step tasks solved with a calculator, a sandboxed file system, Python and search.

Every episode runs against its own sandbox (a bubblewrap `local` sandbox, wiped between episodes): the
task's input files are written into its workspace at setup, the file and Python tools act only inside
it, and a task that asks for a file is graded by reading that file back from the sandbox.
"""

from __future__ import annotations

import asyncio
import posixpath
import random
import re
from fractions import Fraction
from typing import Any

import envhub
import envhub.sandbox
from envhub.messages import Message
from envhub.sandbox import ExecResult, IsolationPolicy, PythonWorker, Sandbox
from envhub_tools.calculator import evaluate, format_number
from envhub_tools.corpus import load_corpus
from envhub_tools.tasks import KINDS, WORKDIR, Task, draw_task

POLICY = IsolationPolicy(memory_mb=256, pids=64, cpus=1.0, wall_time_s=20, disk_mb=32, max_files=2_000)
"""Small limits: the tasks need a few kilobytes of files and a few seconds of Python."""
FILE_TIMEOUT_S = 5.0
"""A file tool that takes longer is stuck (on a pipe the agent made, say), not slow."""
PYTHON_TIMEOUT_S = 10.0
MAX_READ_BYTES = 64 * 1024
MAX_WRITE_BYTES = 1024 * 1024
MAX_LISTED = 200
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


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


def _failed(result: ExecResult, path: str) -> OSError:
    """The error a file command's failure means, worded for the agent."""
    if result.timed_out:
        return TimeoutError(f"{path} could not be accessed within {FILE_TIMEOUT_S:g} s (is it a pipe?)")
    message = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.exit_code}"
    if "No such file" in message:
        return FileNotFoundError(f"{path} does not exist")
    if "Is a directory" in message:
        return IsADirectoryError(f"{path} is a directory; use list_files")
    if "Not a directory" in message:
        return NotADirectoryError(f"a parent of {path} is a file, not a directory")
    return OSError(message.replace(WORKDIR + "/", ""))


def final_number(text: str) -> Fraction | None:
    """The last number written in an answer ("The total is 1,234." -> 1234), or None."""
    found = _NUMBER.findall(text)
    return Fraction(found[-1].replace(",", "")) if found else None


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

    def __init__(self, kind: str | None = None, *, max_turns: int | None = None) -> None:
        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)} (or none for all)")
        super().__init__(max_turns=max_turns)
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
        await self._stop_worker()
        if self._sandbox is None or self._sandbox.closed:
            self._sandbox = await envhub.sandbox.open("local", policy=POLICY)
        else:
            await self._sandbox.reset()  # one sandbox per env, emptied between episodes
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
        target = workspace_path(path)
        # Listed inside the sandbox: a host-side walk would have to guard every symlink the agent made.
        result = await self.sandbox.exec(
            ["find", target, "-maxdepth", "1", "-printf", "%d %y %f\\n"], timeout=FILE_TIMEOUT_S
        )
        if not result.ok:
            raise _failed(result, path)
        entries = [line.split(" ", 2) for line in result.stdout.splitlines()]
        if entries and entries[0][:2] != ["0", "d"]:
            raise NotADirectoryError(f"{path} is a file; use read_file")
        names = sorted(name + ("/" if kind == "d" else "") for depth, kind, name in entries if depth == "1")
        if len(names) > MAX_LISTED:
            return [*names[:MAX_LISTED], f"... and {len(names) - MAX_LISTED} more"]
        return names

    @envhub.tool
    async def read_file(self, path: str) -> str:
        """Read a text file of the workspace.

        Args:
            path: The file, relative to the workspace.
        """
        target = workspace_path(path)
        return (await self._read(target, path)).decode(errors="replace")

    @envhub.tool
    async def write_file(self, path: str, content: str) -> str:
        """Create or replace a text file in the workspace, making its directories.

        Args:
            path: The file, relative to the workspace.
            content: The text to write.
        """
        target = workspace_path(path)
        data = content.encode()
        if len(data) > MAX_WRITE_BYTES:
            raise ValueError(f"content is {len(data)} bytes; the most one write takes is {MAX_WRITE_BYTES}")
        if target == WORKDIR:
            raise IsADirectoryError(f"{path} is the workspace itself; name a file")
        # Written by a command inside the sandbox, not from the host: a pipe the agent planted at the
        # path would block a host-side open forever, where here it only times out.
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        result = await self.sandbox.exec(
            ["/bin/sh", "-c", script, "sh", target], stdin=data, timeout=FILE_TIMEOUT_S
        )
        if not result.ok:
            raise _failed(result, path)
        return f"wrote {len(data)} bytes to {target}"

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

    async def _read(self, target: str, path: str) -> bytes:
        """A file's first bytes, read inside the sandbox (for the same reason as in `write_file`)."""
        result = await self.sandbox.exec(
            ["head", "-c", str(MAX_READ_BYTES + 1), "--", target], timeout=FILE_TIMEOUT_S
        )
        if not result.ok:
            raise _failed(result, path)
        data = result.stdout.encode()
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
            written = (await self._read(workspace_path(task.output_file), task.output_file)).decode()
        except OSError:
            return 0.0
        return float(re.fullmatch(r"\s*-?\d+\s*", written) is not None and int(written) == task.expected)

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
