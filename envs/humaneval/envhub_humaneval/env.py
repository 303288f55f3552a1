"""`humaneval-v0`: one HumanEval problem per episode, graded like every task of envhub's code family.

The answer is HumanEval's completion: it is appended to the problem's prompt, as the benchmark's own
harness does (`prompt + completion`), so a reply may be the whole module, the function alone, or just
its body. The grade is envhub-code's: the problem's own `check` assertions run by
`envhub.grading.grade_python` in a fresh sandbox, canaries mixed in, reward 1 only when every
assertion holds (HumanEval's pass/fail), else 0.
"""

from __future__ import annotations

import random

from envhub_code import CodeSingle, CodeTask, extract_code

from envhub.sandbox import Backend
from envhub_humaneval.problems import humaneval_tasks, prompts


class HumanEval(CodeSingle):
    """OpenAI's HumanEval: complete a Python function from its signature and docstring (164 problems).

    Options: `task` (a problem: "HumanEval/17", or its index 17; else seed s plays problem s % 164), `backend`
    (the grading sandbox), `partial_credit` (reward the fraction of assertions passed instead).
    """

    def __init__(
        self,
        *,
        task: str | int | None = None,
        backend: Backend = "local",
        max_turns: int | None = None,
        partial_credit: bool = False,
    ) -> None:
        super().__init__(
            task=None if task is None else task_id(task),
            backend=backend,
            max_turns=max_turns,
            partial_credit=partial_credit,
        )

    def _init_tasks(
        self, source: str, path: str | None, split: str, task: str | None, backend: Backend
    ) -> None:
        """The HumanEval problems instead of a code source (the constructor takes no `source`)."""
        self.tasks = humaneval_tasks()
        if task is not None:
            self._find(task)
        self.fixed_task = task
        self.backend = backend
        self._grade = None

    def _find(self, task: str) -> CodeTask:
        return super()._find(task_id(task))

    def _draw(self, rng: random.Random) -> CodeTask:
        """Seed s plays HumanEval/(s % 164), so seeds 0..163 are the benchmark in its own order (and
        `envhub check humaneval-v0 --seeds 164` covers every problem); a chosen `task` wins."""
        if self.options.get("task", self.fixed_task) is None and self.seed is not None:
            self.task = self.tasks[self.seed % len(self.tasks)]
            self._grade = None
            return self.task
        return super()._draw(rng)

    def setup(self, rng: random.Random) -> str:
        task = self._draw(rng)
        return (
            "Complete this Python function. Your code is appended to the prompt below and run against "
            "hidden tests; reply with the completed function (or the whole module) in one ```python "
            f"block.\n\n```python\n{prompts()[task.id].rstrip()}\n```"
        )

    def submission(self, answer: str) -> str:
        """The prompt followed by the reply's code, as HumanEval's harness runs a completion."""
        code = extract_code(answer)
        return f"{prompts()[self.task.id]}\n{code}" if code.strip() else ""


def task_id(task: str | int) -> str:
    """`"HumanEval/17"`, `"17"` or `17` → `"HumanEval/17"`; an index out of range says which exist."""
    text = str(task)
    if not text.isdigit():
        return text
    tasks = humaneval_tasks()
    if int(text) >= len(tasks):
        raise ValueError(f"no HumanEval problem {text}: the indices run from 0 to {len(tasks) - 1}")
    return tasks[int(text)].id
