"""Python programming environments: answer with a solution, or work it out in a sandboxed REPL first.

Both are graded the same way: the submitted code against the task's hidden tests, in a fresh sandbox,
by `envhub.grading.grade_python` (see `docs/rewards.md`). The reference solution and the hidden tests
stay on the host; the agent's own sandbox (the REPL's) is closed before grading starts.

The reward is binary, `all_passed`: passing some of the tests is not solving the task, and a fraction
rewards answers that are right on easy inputs only. `partial_credit=True` makes `passed_fraction` the
reward instead (and `all_passed` a weight-0 record).
"""

from __future__ import annotations

import contextlib
import functools
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import envhub
from envhub.authoring import Reaction
from envhub.grading import GRADE_POLICY, GradeReport, HiddenTest, grade_python
from envhub.messages import Message, ToolCall
from envhub.sandbox import Backend, IsolationPolicy, Sandbox, SandboxError
from envhub.sandbox import open as open_sandbox
from envhub.sandbox.python_repl import PythonWorker
from envhub_code.loaders import load_humaneval, load_mbpp
from envhub_code.tasks import CodeTask, builtin_tasks, split_of

SOURCES = ("builtin", "humaneval", "mbpp")
SPLITS = ("all", "train", "test")
REPL_POLICY = IsolationPolicy(memory_mb=512, pids=64, cpus=1.0, wall_time_s=30.0, disk_mb=64)
OUTPUT_LIMIT = 4000
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def extract_code(text: str) -> str:
    """The last fenced code block of a reply, or the whole reply when it has none."""
    blocks = _FENCE.findall(text)
    return str(blocks[-1]) if blocks else text


def load_tasks(source: str = "builtin", path: str | None = None, split: str = "all") -> tuple[CodeTask, ...]:
    """The tasks of a source: the built-in set (with its train/test split) or a HumanEval/MBPP file."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    if source == "builtin":
        if path is not None:
            raise ValueError("the builtin source takes no path; use source='humaneval' or 'mbpp' for files")
        return tuple(t for i, t in enumerate(builtin_tasks()) if split in ("all", split_of(i)))
    if path is None:
        raise ValueError(f"source={source!r} needs path=... (a .jsonl or .parquet file)")
    if split != "all":
        raise ValueError(f"{source} files have no built-in split; pass split='all' (the default)")
    resolved = Path(path).resolve()
    return _load_file(source, str(resolved), resolved.stat().st_mtime_ns)


@functools.cache
def _load_file(source: str, path: str, mtime_ns: int) -> tuple[CodeTask, ...]:
    return tuple(load_humaneval(path) if source == "humaneval" else load_mbpp(path))


PARTIAL_CREDIT = {"passed_fraction": 1.0, "all_passed": 0.0}
"""The weights of `partial_credit=True`: the fraction of hidden tests passed is the reward."""


class CodeTaskEnv:
    """What both code environments share: choosing the task, grading once, and the reward components."""

    reset_options: ClassVar[dict[str, str] | None] = {
        "task": "the task id to play, instead of the constructor's task= or the one the seed draws"
    }
    """`_draw` reads `options["task"]`; `reset` refuses any other key."""
    tasks: tuple[CodeTask, ...]
    task: CodeTask
    fixed_task: str | None
    backend: Backend
    options: dict[str, Any]
    reward_weights: Mapping[str, float]
    _grade: GradeReport | None

    def _init_tasks(
        self, source: str, path: str | None, split: str, task: str | None, backend: Backend
    ) -> None:
        self.tasks = load_tasks(source, path, split)
        if not self.tasks:
            raise ValueError(f"no tasks in {source} ({path or split})")
        if task is not None:
            self._find(task)
        self.fixed_task = task
        self.backend = backend
        self._grade = None

    def _find(self, task_id: str) -> CodeTask:
        for t in self.tasks:
            if t.id == task_id:
                return t
        close = [t.id for t in self.tasks if task_id.split("-")[0] in t.id][:5]
        raise ValueError(f"no task {task_id!r}; e.g. {', '.join(close or [t.id for t in self.tasks[:5]])}")

    def _draw(self, rng: random.Random) -> CodeTask:
        """The task: `options={"task": id}` at reset, else the constructor's `task=`, else seeded."""
        chosen = self.options.get("task", self.fixed_task)
        self.task = self._find(chosen) if chosen is not None else rng.choice(self.tasks)
        self._grade = None
        return self.task

    def _examples(self) -> str:
        lines = [t.source for t in self.task.public_tests if t.source]
        return "Examples:\n" + "\n".join(f"    {line}" for line in lines) if lines else ""

    def submission(self, answer: str) -> str:
        """The code being graded."""
        return extract_code(answer)

    async def graded(self, answer: str) -> GradeReport | None:
        """The grade of this episode's submission, computed once; None when nothing was submitted."""
        if self._grade is None:
            code = self.submission(answer)
            if not code.strip():
                return None
            self._grade = await grade_python(
                code,
                _all_tests(self.task),
                prelude=self.task.prelude,
                check_prelude=self.task.check_prelude,
                backend=self.backend,
                policy=GRADE_POLICY,
            )
        return self._grade

    @envhub.reward
    async def all_passed(self, answer: str) -> float:
        """The reward: 1 when every hidden test passed on a valid grade, canaries included; else 0.

        A statement test's pass is the solution's own claim, so it counts as a failure here.
        """
        grade = await self.graded(answer)
        return float(grade is not None and grade.fraction({t.name for t in self.task.hidden_tests}) == 1.0)

    @envhub.reward(weight=0.0)
    async def passed_fraction(self, answer: str) -> float:
        """Recorded (the reward with `partial_credit=True`): the fraction of hidden tests passed."""
        grade = await self.graded(answer)
        return grade.fraction({t.name for t in self.task.hidden_tests}) if grade else 0.0

    @envhub.reward(weight=0.0)
    async def public_passed(self, answer: str) -> float:
        """Recorded: the fraction of the public examples passed (what the agent could check itself)."""
        grade = await self.graded(answer)
        return grade.fraction({t.name for t in self.task.public_tests}) if grade else 0.0

    @envhub.reward(weight=0.0)
    async def grade_valid(self, answer: str) -> float:
        """Recorded: 1 when the grader ran every test and signed a complete report (0: the run was void)."""
        grade = await self.graded(answer)
        return float(grade is not None and grade.valid)


def _all_tests(task: CodeTask) -> list[HiddenTest]:
    hidden = {t.name for t in task.hidden_tests}
    return list(task.hidden_tests) + [t for t in task.public_tests if t.name not in hidden]


class CodeSingle(CodeTaskEnv, envhub.SingleTurnEnv):
    """Write a Python function in one reply; scored 1 if it passes every hidden test, else 0.

    Options: `source` ("builtin", "humaneval", "mbpp"), `path` (the file, for the last two), `split`
    ("all", "train", "test"; built-in only), `task` (one task id), `backend` (the grading sandbox),
    `partial_credit` (reward the fraction of hidden tests passed rather than 1 for passing them all).
    """

    system_prompt = "You are an expert Python programmer. Answer with code only, in one ```python block."

    def __init__(
        self,
        *,
        source: str = "builtin",
        path: str | None = None,
        split: str = "all",
        task: str | None = None,
        backend: Backend = "local",
        max_turns: int | None = None,
        partial_credit: bool = False,
    ) -> None:
        self.reward_weights = PARTIAL_CREDIT if partial_credit else {}
        super().__init__(max_turns=max_turns)
        self._init_tasks(source, path, split, task, backend)

    def setup(self, rng: random.Random) -> str:
        task = self._draw(rng)
        return (
            f"{task.statement}\n\n{self._examples()}\n\n"
            "Reply with the complete solution in a single ```python code block."
        ).replace("\n\n\n\n", "\n\n")

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        return f"```python\n{self.task.reference}```"


class CodeRepl(CodeTaskEnv, envhub.ToolEnv):
    """Work in a stateful, sandboxed Python REPL, check the public examples, then submit.

    The episode ends with `submit(code)` (or a reply without tool calls, whose last ```python block is
    then the submission). The REPL's sandbox is closed before the hidden tests run in a fresh one.
    """

    system_prompt = (
        "You are an expert Python programmer. Use the python tool to experiment, run_public_tests to "
        "check your code against the examples, and submit to hand in your final solution."
    )

    def __init__(
        self,
        *,
        source: str = "builtin",
        path: str | None = None,
        split: str = "all",
        task: str | None = None,
        backend: Backend = "local",
        max_turns: int | None = None,
        partial_credit: bool = False,
    ) -> None:
        self.reward_weights = PARTIAL_CREDIT if partial_credit else {}
        super().__init__(max_turns=max_turns if max_turns is not None else 12)
        self._init_tasks(source, path, split, task, backend)
        self.submitted: str | None = None
        self._sandbox: Sandbox | None = None
        self._repl: PythonWorker | None = None

    async def setup(self, rng: random.Random) -> str:
        await self._close_session()
        self.submitted = None
        task = self._draw(rng)
        return (
            f"{task.statement}\n\n{self._examples()}\n\n"
            "Hidden tests decide your score. When you are done, call submit with the complete code."
        ).replace("\n\n\n\n", "\n\n")

    @envhub.tool
    async def python(self, code: str) -> str:
        """Run Python code in your persistent session (variables survive between calls); shows the output.

        Args:
            code: Python statements; the value of a final expression is printed.
        """
        if self._repl is None:
            self._sandbox = await open_sandbox(self.backend, policy=REPL_POLICY)
            self._repl = await self._sandbox.python()
        result = await self._repl.run(code, timeout=10.0)
        text = (result.stdout + result.stderr).strip() or "(no output)"
        if len(text) > OUTPUT_LIMIT:
            text = text[:OUTPUT_LIMIT] + f"\n... ({len(text) - OUTPUT_LIMIT} more characters cut)"
        return text

    @envhub.tool
    async def run_public_tests(self, code: str) -> str:
        """Run the public examples (not the hidden tests) against a complete solution.

        Args:
            code: The complete solution module.
        """
        grade = await grade_python(
            code,
            list(self.task.public_tests),
            prelude=self.task.prelude,
            check_prelude=self.task.check_prelude,
            backend=self.backend,
        )
        lines = []
        for test, result in zip(self.task.public_tests, grade.results, strict=True):
            verdict = "passed" if result.passed else f"FAILED: {result.error}"
            lines.append(f"{test.source or test.name}: {verdict}")
        passed = sum(r.passed for r in grade.results)
        return f"{passed}/{len(grade.results)} public tests passed\n" + "\n".join(lines)

    @envhub.tool
    def submit(self, code: str) -> str:
        """Hand in the complete solution; this ends the episode.

        Args:
            code: The complete solution module.
        """
        self.submitted = code
        return "Submitted. The hidden tests will now run."

    async def react(self, message: Message) -> Reaction:
        reaction = await super().react(message)
        if self.submitted is not None and not reaction.done:
            return Reaction(observation=reaction.observation, done=True, info=reaction.info)
        return reaction

    def submission(self, answer: str) -> str:
        return self.submitted if self.submitted is not None else extract_code(answer)

    async def graded(self, answer: str) -> GradeReport | None:
        await self._close_session()  # the agent's sandbox is gone before the hidden tests arrive
        return await super().graded(answer)

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        call = ToolCall.create("submit", {"code": self.task.reference}, id="call_submit")
        return Message(role="assistant", tool_calls=[call])

    async def _close_session(self) -> None:
        sandbox, self._sandbox, self._repl = self._sandbox, None, None
        if sandbox is not None:
            with contextlib.suppress(SandboxError):  # already dead: nothing of it outlives the episode
                await sandbox.close()

    async def close(self) -> None:
        await self._close_session()
