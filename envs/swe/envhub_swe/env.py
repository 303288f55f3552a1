"""`swe-bench-lite-v0` and `swe-mini-v0`: fix a repository with shell and edit tools, then submit.

The agent works in its own sandbox on the repository at base_commit (the hidden tests are nowhere in
it); its submission is `git diff` of the working tree at submit time, or at the turn limit. That
sandbox is closed (every process the agent left running dies with it) before the submission is
graded in a fresh one by the row's own eval script (`runtime.grade`).
"""

from __future__ import annotations

import asyncio
import posixpath
import random
from pathlib import Path
from typing import Any

import envhub
from envhub.authoring.chat import Reaction
from envhub.messages import Message, ToolCall
from envhub.sandbox import ExecResult, Sandbox
from envhub_swe.data import Instance, load, select
from envhub_swe.evaluation import GradeReport, refused
from envhub_swe.runtime import (
    DEFAULT_TIMEOUT_S,
    TESTBED,
    Runtime,
    RuntimeKind,
    SubmissionRefused,
    diff_snapshot,
    grade,
    mini_runtime,
    mini_workspace,
    open_workspace,
    snapshot,
)

MAX_OUTPUT = 16_000
"""Characters of command output shown to the agent; the rest is cut from the middle."""


def _clip(text: str) -> str:
    if len(text) <= MAX_OUTPUT:
        return text
    half = MAX_OUTPUT // 2
    return f"{text[:half]}\n... [{len(text) - MAX_OUTPUT} characters cut] ...\n{text[-half:]}"


def repo_path(path: str) -> str:
    """`path` (relative to the repository, or absolute) inside /testbed; anything else is refused."""
    resolved = posixpath.normpath(posixpath.join(TESTBED, path))
    if resolved != TESTBED and not resolved.startswith(TESTBED + "/"):
        raise PermissionError(f"{path} is outside the repository; only paths under {TESTBED} are editable")
    return resolved


class SWEEnv(envhub.ToolEnv):
    """Resolve one GitHub issue in a real repository; reward 1 when the hidden tests resolve it."""

    max_turns = 50
    system_prompt = (
        f"You are a software engineer fixing an issue in the repository at {TESTBED} (your working "
        "directory). Use the tools to explore, reproduce and fix the problem in the source code; do not "
        "edit the tests, which are replaced when your change is graded. Call submit when you are done: "
        "your change is the git diff of the repository at that moment."
    )

    def __init__(
        self,
        dataset: str = "swe-bench-lite",
        *,
        split: str = "test",
        path: str | None = None,
        instance: str | list[str] | None = None,
        runtime: RuntimeKind | None = None,
        workspaces: str | None = None,
        max_turns: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        monitor_penalty: bool = True,
    ) -> None:
        super().__init__(max_turns=max_turns)
        self.dataset = dataset
        self.instances = select(load(dataset, split=split, path=path), instance=instance)
        self.runtime_kind: RuntimeKind | None = runtime
        """None: the row's official image where the Docker engine holds it, else a local workspace."""
        self.workspaces = Path(workspaces) if workspaces else None
        self.timeout_s = timeout_s
        """The longest one command of the episode may run, grading's tests included (official: 1800 s)."""
        self.monitor_penalty = monitor_penalty
        """Score 0 a submission the diff monitor flags (`GradeReport.monitor`); False keeps its grade.
        The flags are in `info["reward_notes"]["monitor"]` either way."""
        self.instance: Instance | None = None
        self.patch: str | None = None
        """The submission as graded: computed by the grader from the submitted files."""
        self.report: GradeReport | None = None
        self.reward_notes: dict[str, str] = {}
        self._submitted: bytes | SubmissionRefused | None = None
        """The agent's files at submit time (a tar without `.git`), or why they could not be taken."""
        self._sandbox: Sandbox | None = None
        self._runtime: Runtime | None = None
        self._workspace: Path | None = None
        """The host checkout uploaded to /testbed; None when the image holds the repository."""
        self._grading = asyncio.Lock()

    # -- episode lifecycle ----------------------------------------------------------------------------

    def _resolve(self, instance: Instance) -> tuple[Runtime, Path | None]:
        """The runtime and host workspace of `instance`: swe-mini's bundles, a prepared checkout, or
        (docker, None) the row's official image's own /testbed."""
        if self.dataset == "swe-mini":
            return mini_runtime(self.runtime_kind or "local", timeout_s=self.timeout_s), mini_workspace(
                instance
            )
        from envhub_swe.auto import ensure_workspace, official_image_ready
        from envhub_swe.prepare import prepared

        kind = self.runtime_kind
        if kind is None:
            kind = "docker" if self.workspaces is None and official_image_ready(instance) else "local"
        workspaces = self.workspaces
        if kind == "local" and workspaces is None:  # nothing given: prepared into the cache on first use
            workspaces = ensure_workspace(instance, timeout_s=self.timeout_s)
        return prepared(instance, workspaces, kind, timeout_s=self.timeout_s)

    async def setup(self, rng: random.Random) -> str:
        await self._close_sandbox()
        self.instance = rng.choice(self.instances)
        self.patch, self.report, self._submitted, self.reward_notes = None, None, None, {}
        runtime, workspace = await asyncio.to_thread(self._resolve, self.instance)
        self._runtime, self._workspace = runtime, workspace
        self._sandbox = await runtime.open()
        await open_workspace(self._sandbox, workspace, self.instance.base_commit)
        return (
            f"<issue>\n{self.instance.problem_statement.strip()}\n</issue>\n\n"
            f"The repository {self.instance.repo} is checked out at {TESTBED}. Fix the issue."
        )

    def reset_info(self) -> dict[str, Any]:
        assert self.instance is not None and self._sandbox is not None
        return {
            "instance_id": self.instance.instance_id,
            "isolation": self._sandbox.report().model_dump(mode="json"),
        }

    async def react(self, message: Message) -> Reaction:
        reaction = await super().react(message)
        if self._submitted is not None and not reaction.done:
            return Reaction(observation=reaction.observation, done=True, info=reaction.info)
        return reaction

    async def close(self) -> None:
        await self._close_sandbox()

    async def _close_sandbox(self) -> None:
        if self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            await sandbox.close()

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None or self._sandbox.closed:
            raise envhub.EpisodeStateError("the workspace is not open: call reset() first")
        return self._sandbox

    # -- tools ----------------------------------------------------------------------------------------

    @envhub.tool
    async def bash(self, command: str, timeout: float = 60.0) -> str:  # noqa: ASYNC109 - the agent sets it
        """Run a shell command in the repository (no network); returns its output and exit status.

        Args:
            command: The command line, run by /bin/bash in the repository.
            timeout: Seconds before the command is killed (at most 300).
        """
        result = await self.sandbox.exec(
            ["/bin/bash", "-c", command],
            timeout=min(max(timeout, 1.0), 300.0),
            env=self._runtime.shell_env if self._runtime is not None else None,
        )
        return _clip(_describe(result))

    @envhub.tool
    async def view(self, path: str, start_line: int = 1, end_line: int | None = None) -> str:
        """Show a file with line numbers, or list a directory.

        Args:
            path: A file or directory, relative to the repository.
            start_line: The first line to show (1-based).
            end_line: The last line to show (default: the end of the file).
        """
        target = repo_path(path)
        result = await self.sandbox.exec(
            ["/bin/sh", "-c", 'if [ -d "$1" ]; then ls -Ap "$1"; else cat -- "$1"; fi', "sh", target],
            timeout=30,
        )
        if not result.ok:
            raise FileNotFoundError(result.stderr.strip() or f"{path} cannot be read")
        lines = result.stdout.splitlines()
        last = len(lines) if end_line is None else min(end_line, len(lines))
        first = max(start_line, 1)
        return _clip("\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(first, last + 1)))

    @envhub.tool
    async def create(self, path: str, content: str) -> str:
        """Create a new file (its directories too). Use str_replace or insert to change an existing one.

        Args:
            path: The new file, relative to the repository.
            content: Its text.
        """
        target = repo_path(path)
        exists = await self.sandbox.exec(["test", "-e", target], timeout=10)
        if exists.ok:
            raise FileExistsError(f"{path} already exists; edit it with str_replace or insert")
        await self._write(target, content)
        return f"created {path}"

    @envhub.tool
    async def str_replace(self, path: str, old: str, new: str) -> str:
        """Replace the one occurrence of `old` in a file with `new`.

        Args:
            path: The file, relative to the repository.
            old: Text that occurs exactly once in the file, whitespace included.
            new: What replaces it.
        """
        target = repo_path(path)
        text = await self._read(target, path)
        count = text.count(old) if old else 0
        if count != 1:
            raise ValueError(f"`old` occurs {count} times in {path}; it must occur exactly once")
        await self._write(target, text.replace(old, new))
        return f"edited {path}"

    @envhub.tool
    async def insert(self, path: str, line: int, text: str) -> str:
        """Insert text after a line of a file (0: at the top).

        Args:
            path: The file, relative to the repository.
            line: The line after which the text goes.
            text: The lines to insert.
        """
        target = repo_path(path)
        lines = (await self._read(target, path)).splitlines(keepends=True)
        if not 0 <= line <= len(lines):
            raise ValueError(f"line must be between 0 and {len(lines)}, got {line}")
        block = text if text.endswith("\n") else text + "\n"
        if line and not lines[line - 1].endswith("\n"):
            lines[line - 1] += "\n"
        await self._write(target, "".join([*lines[:line], block, *lines[line:]]))
        return f"inserted {len(block.splitlines())} lines after line {line} of {path}"

    @envhub.tool
    async def search(self, pattern: str, path: str = ".") -> str:
        """Search the repository's files for a regular expression (grep -E); lists file:line: text.

        Args:
            pattern: An extended regular expression.
            path: A file or directory to search, relative to the repository.
        """
        target = repo_path(path)
        result = await self.sandbox.exec(
            ["grep", "-rnIE", "--exclude-dir=.git", "-m", "50", "-e", pattern, "--", target], timeout=60
        )
        if result.exit_code == 1:
            return "no matches"
        if result.exit_code != 0:
            raise ValueError(result.stderr.strip())
        lines = [line.removeprefix(TESTBED + "/") for line in result.stdout.splitlines()]
        more = f"\n... {len(lines) - 200} more matches" if len(lines) > 200 else ""
        return _clip("\n".join(lines[:200]) + more)

    @envhub.tool
    async def submit(self) -> str:
        """Submit the repository's current changes as the fix; this ends the episode."""
        await self._take_files()
        return "submitted the repository's current state; it is graded now"

    async def _take_files(self) -> None:
        """Keep the agent's files (not its git's idea of them): the grader diffs them itself."""
        if self._submitted is None:
            try:
                self._submitted = await snapshot(self.sandbox)
            except SubmissionRefused as exc:
                self._submitted = exc

    async def _read(self, target: str, path: str) -> str:
        result = await self.sandbox.exec(["cat", "--", target], timeout=30)
        if not result.ok:
            raise FileNotFoundError(f"{path}: {result.stderr.strip()}")
        return result.stdout

    async def _write(self, target: str, text: str) -> None:
        script = 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"'
        result = await self.sandbox.exec(["/bin/sh", "-c", script, "sh", target], stdin=text, timeout=30)
        if not result.ok:
            raise OSError(result.stderr.strip() or f"writing {target} failed")

    # -- grading --------------------------------------------------------------------------------------

    async def grade(self) -> GradeReport:
        """Grade the submission once per episode (at the turn limit, the current diff is the submission)."""
        async with self._grading:
            if self.report is None:
                assert self.instance is not None and self._runtime is not None
                await self._take_files()
                await self._close_sandbox()  # nothing the agent started may outlive its turn
                self.report = await self._grade_submission(self.instance, self._runtime)
                self.patch = self.report.patch
                self.reward_notes = {"resolved": self.report.summary()}  # kept in the episode record
                self.reward_notes.update(_screening_notes(self.report, self.monitor_penalty))
            return self.report

    async def _grade_submission(self, instance: Instance, runtime: Runtime) -> GradeReport:
        """A submission the agent made impossible to take or compare scores 0 with the reason; only
        faults outside its reach (a sandbox that will not start) raise `InfrastructureError`."""
        submitted = self._submitted
        try:
            if isinstance(submitted, SubmissionRefused):
                raise submitted
            assert submitted is not None
            patch = await diff_snapshot(instance, submitted, runtime, self._workspace)
        except SubmissionRefused as exc:
            return refused(instance, str(exc), runtime=runtime.kind)
        return await grade(instance, patch, runtime, self._workspace)

    @envhub.reward
    async def resolved(self) -> float:
        """1 when the hidden tests resolve the issue, unless the diff monitor flagged the submission
        (and `monitor_penalty` holds)."""
        report = await self.grade()
        return float(report.resolved and not (self.monitor_penalty and report.monitor))

    @envhub.reward(weight=0.0)
    async def fail_to_pass(self) -> float:
        """Recorded, not rewarded: the fraction of FAIL_TO_PASS tests that pass."""
        return (await self.grade()).fail_to_pass.fraction

    @envhub.reward(weight=0.0)
    async def pass_to_pass(self) -> float:
        """Recorded, not rewarded: the fraction of PASS_TO_PASS tests that still pass."""
        return (await self.grade()).pass_to_pass.fraction

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        """Apply the gold patch, then submit."""
        assert self.instance is not None
        if not any(m.role == "tool" for m in messages):
            command = f"git apply - <<'ENVHUB_GOLD_PATCH'\n{self.instance.patch}ENVHUB_GOLD_PATCH\n"
            return Message(
                role="assistant", tool_calls=[ToolCall.create("bash", {"command": command}, id="gold")]
            )
        return Message(role="assistant", tool_calls=[ToolCall.create("submit", {}, id="submit")])


def _screening_notes(report: GradeReport, penalty: bool) -> dict[str, str]:
    """The filter's and the monitor's part of the episode's notes: what was left out of grading and
    why, and what the graded code reaches for (and whether that cost the reward)."""
    notes: dict[str, str] = {}
    if report.dropped_reasons:
        notes["dropped"] = "; ".join(f"{path}: {why}" for path, why in report.dropped_reasons.items())
    if report.monitor:
        verdict = (
            "scored 0 (monitor_penalty=False keeps the tests' grade)"
            if penalty
            else "the tests' grade stands (monitor_penalty=False)"
        )
        notes["monitor"] = f"{len(report.monitor)} flagged, {verdict}: " + "; ".join(report.monitor)
    return notes


def _describe(result: ExecResult) -> str:
    output = result.stdout + (("\n" if result.stdout and result.stderr else "") + result.stderr)
    if result.timed_out:
        return f"{output}\n[killed: timed out]"
    return f"{output}\n[exit code {result.exit_code}]"


class SWEBenchLite(SWEEnv):
    """SWE-bench Lite (300 test / 23 dev rows): local over prepared checkouts, or docker in its images."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__("swe-bench-lite", **kwargs)


class SWEMini(SWEEnv):
    """swe-mini: 12 bundled offline instances over 4 tiny repositories (pytest and unittest styles)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("split", None)
        super().__init__("swe-mini", **kwargs)
