"""HumanEval- and MBPP-style files load from JSONL and Parquet, split into probes and checks, and grade."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from envhub_code import CodeSingle, load_humaneval, load_mbpp

HUMANEVAL = [
    {
        "task_id": "Toy/0",
        "prompt": (
            'def add(a: float, b: float) -> float:\n    """Add two numbers.\n'
            '    >>> add(2, 3)\n    5\n    """\n'
        ),
        "canonical_solution": "    return a + b\n",
        "test": (
            'METADATA = {"author": "tests"}\n\n\ndef check(candidate):\n'
            "    assert candidate(2, 3) == 5\n"
            "    assert candidate(-1, 1) == 0\n"
            "    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n"
            "    assert True\n"
        ),
        "entry_point": "add",
    },
    {
        "task_id": "Toy/1",
        "prompt": 'def double_all(xs: list) -> list:\n    """Double every element."""\n',
        "canonical_solution": "    return [2 * x for x in xs]\n",
        "test": (
            "import math\n\n\ndef check(candidate):\n"
            "    assert candidate([]) == []\n"
            "    for n in range(4):\n"
            "        assert candidate([n]) == [2 * n]\n"
            "    assert candidate([1, 2]) == [2, 4] and math.isfinite(1.0)\n"
        ),
        "entry_point": "double_all",
    },
]

MBPP = [
    {
        "task_id": 1,
        "text": "Write a function to square every number in a list.",
        "code": "def squares(xs):\n    return [x * x for x in xs]\n",
        "test_list": [
            "assert squares([1, 2]) == [1, 4]",
            "assert squares([]) == []",
            "assert set(squares([3, -3])) == {9}",
        ],
        "test_setup_code": "",
        "challenge_test_list": [],
    },
    {
        "task_id": 2,
        "text": "Write a function for the hypotenuse of a right triangle.",
        "code": "import math\n\ndef hyp(a, b):\n    return math.hypot(a, b)\n",
        "test_list": ["assert math.isclose(hyp(3, 4), 5.0)", "assert hyp(0, 0) == 0.0"],
        "test_setup_code": "import math",
        "challenge_test_list": ["assert hyp(5, 12) == 13.0"],
    },
]


def _write(rows: list[dict[str, Any]], path: Path) -> Path:
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_humaneval_tests_are_split_into_probes_and_checks(tmp_path: Path, suffix: str) -> None:
    add, double = load_humaneval(_write(HUMANEVAL, tmp_path / f"he{suffix}"))
    assert add.id == "Toy/0" and add.entry_point == "add"
    assert [(t.probe, t.check) for t in add.hidden_tests] == [
        ("add(2, 3)", "result == 5"),
        ("add(-1, 1)", "result == 0"),
        ("add(0.5, 0.25)", "abs(result - 0.75) < 1e-09"),
    ]  # `assert True` tests nothing and is dropped
    assert "METADATA" in add.check_prelude and "METADATA" not in add.prelude  # no probe needs it
    assert add.public_tests == add.hidden_tests[:1]
    assert "def add(a: float, b: float)" in add.statement and add.reference.endswith("return a + b\n")
    # The loop over range(4) is unrolled: four probe/check tests, none left to run beside the solution.
    assert [(t.probe, t.check) for t in double.hidden_tests[1:5]] == [
        (f"double_all([{n}])", f"result == [2 * {n}]") for n in range(4)
    ]
    assert double.hidden_tests[5].check == "result == [2, 4] and math.isfinite(1.0)"
    assert double.prelude == "import math"


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_mbpp_tests_are_split_into_probes_and_checks(tmp_path: Path, suffix: str) -> None:
    squares, hyp = load_mbpp(_write(MBPP, tmp_path / f"mbpp{suffix}"))
    assert squares.id == "mbpp-1" and squares.entry_point == "squares"
    assert [t.check for t in squares.hidden_tests] == [
        "result == [1, 4]",
        "result == []",
        "set(result) == {9}",
    ]
    assert "assert squares([1, 2]) == [1, 4]" in squares.statement
    assert [t.probe for t in hyp.hidden_tests] == ["hyp(3, 4)", "hyp(0, 0)", "hyp(5, 12)"]  # challenge too
    assert hyp.prelude == "import math"


async def _play(env: CodeSingle, task_id: str, code: str | None = None) -> tuple[float, dict[str, float]]:
    await env.reset(seed=0, options={"task": task_id})
    action = env.reference_action(env.messages) if code is None else f"```python\n{code}```"
    result = await env.step(action)
    return result.reward, result.info["reward_components"]


@pytest.mark.parametrize(("source", "rows"), [("humaneval", HUMANEVAL), ("mbpp", MBPP)])
async def test_oracle_scores_one_on_loaded_tasks(
    tmp_path: Path, source: str, rows: list[dict[str, Any]]
) -> None:
    path = _write(rows, tmp_path / f"{source}.parquet")
    env = CodeSingle(source=source, path=str(path))
    for task in env.tasks:
        reward, components = await _play(env, task.id)
        assert reward == 1.0, (task.id, components)


async def test_loaded_tasks_grade_wrong_solutions_exactly(tmp_path: Path) -> None:
    path = str(_write(HUMANEVAL, tmp_path / "he.jsonl"))
    env = CodeSingle(source="humaneval", path=path, partial_credit=True)
    reward, components = await _play(env, "Toy/0", "def add(a, b):\n    return int(a + b)\n")
    assert reward == pytest.approx(2 / 3)  # 0.75 comes back as 0
    assert components["public_passed"] == 1.0 and components["all_passed"] == 0.0
    reward, _ = await _play(env, "Toy/1", "def double_all(xs):\n    return [2 * x for x in xs][:1]\n")
    assert reward == pytest.approx(5 / 6)  # the unrolled loop over 1-element lists still passes
    binary = CodeSingle(source="humaneval", path=path)
    assert (await _play(binary, "Toy/0", "def add(a, b):\n    return int(a + b)\n"))[0] == 0.0
    mbpp = CodeSingle(source="mbpp", path=str(_write(MBPP, tmp_path / "mbpp.jsonl")))
    reward, _ = await _play(mbpp, "mbpp-2", "def hyp(a, b):\n    return (a * a + b * b) ** 0.5 + 1e-3\n")
    assert reward == 0.0


def test_bad_files_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no task file"):
        load_mbpp(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="lacks the HumanEval field"):
        load_humaneval(_write([{"prompt": "x"}], tmp_path / "bad.jsonl"))


def test_a_task_left_with_no_test_of_the_solution_is_left_out(tmp_path: Path) -> None:
    """Assertions that compare the solution with itself test nothing and are dropped; a task with no
    other test could not be graded (every answer would be an error, the reference's too)."""
    row = {
        "task_id": "Self/0",
        "prompt": "def ident(x):\n",
        "canonical_solution": "    return x\n",
        "test": "def check(candidate):\n    assert candidate(1) == candidate(1)\n",
        "entry_point": "ident",
    }
    with pytest.warns(UserWarning, match=r"left out 1 task\(s\) .*Self/0"):
        tasks = load_humaneval(_write([HUMANEVAL[0], row], tmp_path / "he.jsonl"))
    assert [t.id for t in tasks] == ["Toy/0"]
