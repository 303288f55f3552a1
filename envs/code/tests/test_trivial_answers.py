"""No trivial answer (a constant, the input echoed, a one-line transform) solves any built-in task.

The sweep grades about 40 trivial answers on all 120 tasks. It judges them on the host, with the
grader's own `judge` (the code that decides pass or fail inside the sandbox): the answers are our own
code, so nothing needs isolating, and 4,800 sandboxes would take minutes. One answer per family is
then graded for real, through the environment, to show the host figure is the grader's figure.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

from envhub_code import CodeSingle, builtin_tasks
from envhub_code.tasks import CodeTask

from envhub.grading._grader import judge
from envhub.grading._probe import normal

CONSTANTS = (
    "0", "1", "-1", "2", "True", "False", "None", "''", "'a'", "' '", "'0'", "'True'", "0.0", "1.0", "-1.0",
    "[]", "[0]", "['']", "{}", "{'': 0}", "()", "(0,)", "set()", "b''",
)  # fmt: skip
TRANSFORMS = (
    "args[0]",
    "args[-1]",
    "args",
    "list(args)",
    "type(args[0])()",
    "sorted(args[0])",
    "args[0][::-1]",
    "len(args[0])",
    "sum(args[0])",
    "bool(args[0])",
    "not args[0]",
    "str(args[0])",
    "args[0].upper()",
    "args[0].lower()",
    "args[0].strip()",
    "args[0].split()",
    "int(args[0])",
    "abs(args[0])",
    "-args[0]",
    "args[0] + 1",
    "args[0] * 2",
    "{}.fromkeys(args[0])",
)
TRIVIAL = CONSTANTS + TRANSFORMS


def trivial_solution(task: CodeTask, body: str) -> str:
    """The task's entry point, taking anything, returning `body`."""
    return f"def {task.entry_point}(*args, **kwargs):\n    return {body}\n"


def host_fraction(task: CodeTask, source: str) -> float:
    """The fraction of hidden tests `source` passes, judged as the grader judges (values rebuilt first)."""
    solution: dict[str, Any] = {}
    exec(source, solution)
    checks: dict[str, Any] = {}
    exec(task.prelude, checks)
    exec(task.check_prelude, checks)
    passed = 0
    for test in task.hidden_tests:
        assert test.check is not None, f"{task.id}: built-in tests are all probe/check tests"
        try:
            value = normal(eval(test.probe, dict(solution)))
        except Exception:
            continue
        passed += judge(test.check, value, checks)["passed"] is True
    return passed / len(task.hidden_tests)


def best_trivial(task: CodeTask) -> tuple[float, str]:
    return max((host_fraction(task, trivial_solution(task, body)), body) for body in TRIVIAL)


async def test_no_trivial_answer_solves_any_builtin_task() -> None:
    tasks = builtin_tasks()
    best = {task.id: best_trivial(task) for task in tasks}
    mean = statistics.fmean(fraction for fraction, _ in best.values())
    worst = sorted(best.items(), key=lambda item: -item[1][0])[:5]
    print(f"\nmean best-trivial passed_fraction over {len(tasks)} tasks x {len(TRIVIAL)} answers: {mean:.3f}")
    print("highest:", ", ".join(f"{task_id} {fraction:.3f} ({body})" for task_id, (fraction, body) in worst))
    solved = [(task_id, body) for task_id, (fraction, body) in best.items() if fraction == 1.0]
    assert solved == [], f"trivial answers solve built-in tasks: {solved}"
    assert mean < 0.05, f"trivial answers earn {mean:.3f} of the tests on average"

    # The host figure is the grader's: the best trivial answer of each family, graded for real.
    samples = [next(t for t in tasks if t.id.startswith(family)) for family in {t.id[:-3] for t in tasks}]

    async def graded(task: CodeTask) -> tuple[str, float]:
        env = CodeSingle(task=task.id, partial_credit=True)
        await env.reset(seed=0)
        result = await env.step(f"```python\n{trivial_solution(task, best[task.id][1])}```")
        assert result.info["reward_components"]["grade_valid"] == 1.0
        return task.id, result.reward

    for task_id, reward in await asyncio.gather(*(graded(t) for t in samples)):
        assert reward == best[task_id][0], task_id
