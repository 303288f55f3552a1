"""Tasks from HumanEval-style and MBPP-style files (JSONL or Parquet) at a path the user gives.

Their tests are assertions (`assert candidate(2, 3) == 5`). Each top-level assertion is split into a
probe (every call of the solution in it: `candidate(2, 3)`) and a check (the assertion with those calls
replaced by `result`), so the solution never sees what it is compared with and the comparison runs in
the grader. A loop over literal values (`for n in range(4): assert ...`) is unrolled first.

A test that still cannot be split (a loop over computed data, the solution's results kept in
variables) could only run beside the solution, as a statement test whose pass the solution could forge;
such a pass never counts toward a reward. A task with one such test is therefore left out, with a
warning naming it: its reward could never be trusted, nor its reference score 1.
"""

from __future__ import annotations

import ast
import json
import warnings
from pathlib import Path
from typing import Any

from envhub.grading import HiddenTest
from envhub_code.tasks import CodeTask

PUBLIC_FROM_TESTS = 1
"""Assertions shown to the agent as examples: the first one of each task."""
MAX_UNROLLED = 1000
"""A literal loop with more iterations than this stays a loop (and its task is left out)."""


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The records of a `.jsonl` / `.json` (one object a line, or a list) or `.parquet` file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no task file at {p}; give the path of a .jsonl or .parquet file")
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = pq.read_table(p).to_pylist()
        return rows
    text = p.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        data = json.loads(text)
        return [dict(row) for row in data]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_humaneval(path: str | Path) -> list[CodeTask]:
    """HumanEval's columns: task_id, prompt, canonical_solution, test (a `check(candidate)`), entry_point."""
    tasks = []
    for n, row in enumerate(read_rows(path)):
        missing = {"prompt", "canonical_solution", "test", "entry_point"} - set(row)
        if missing:
            raise ValueError(f"{path}: row {n} lacks the HumanEval field(s) {sorted(missing)}")
        entry = str(row["entry_point"])
        prelude, check_prelude, tests = _humaneval_tests(str(row["test"]), entry)
        tasks.append(
            CodeTask(
                id=str(row.get("task_id", f"humaneval-{n}")),
                statement=(
                    f"Complete the Python function `{entry}`; reply with the whole module, prompt "
                    f"included.\n\n```python\n{str(row['prompt']).rstrip()}\n```"
                ),
                entry_point=entry,
                reference=str(row["prompt"]) + str(row["canonical_solution"]),
                public_tests=tests[:PUBLIC_FROM_TESTS],
                hidden_tests=tests,
                prelude=prelude,
                check_prelude=check_prelude,
                source=f"humaneval:{Path(path).name}",
            )
        )
    return _trusted_only(tasks, path)


def load_mbpp(path: str | Path) -> list[CodeTask]:
    """MBPP's columns: task_id, text (or prompt), code, test_list, optional test_setup_code and
    challenge_test_list."""
    tasks = []
    for n, row in enumerate(read_rows(path)):
        text = row.get("text") or row.get("prompt")
        if not text or "code" not in row or "test_list" not in row:
            raise ValueError(f"{path}: row {n} needs the MBPP fields text (or prompt), code and test_list")
        code = str(row["code"])
        names = {
            node.name for node in ast.parse(code).body if isinstance(node, ast.FunctionDef | ast.ClassDef)
        }
        asserts = [str(t) for t in list(row["test_list"]) + list(row.get("challenge_test_list") or [])]
        tests = _assertion_tests(asserts, names)
        prelude, check_prelude = _mbpp_preludes(str(row.get("test_setup_code") or ""), tests)
        entry = sorted(names)[0] if names else "solution"
        examples = "\n".join(asserts[:PUBLIC_FROM_TESTS])
        tasks.append(
            CodeTask(
                id=f"mbpp-{row.get('task_id', n)}",
                statement=f"{str(text).strip()}\n\nYour code should pass tests like this one:\n{examples}",
                entry_point=entry,
                reference=code,
                public_tests=tests[:PUBLIC_FROM_TESTS],
                hidden_tests=tests,
                prelude=prelude,
                check_prelude=check_prelude,
                source=f"mbpp:{Path(path).name}",
            )
        )
    return _trusted_only(tasks, path)


def _mbpp_preludes(setup_code: str, tests: list[HiddenTest]) -> tuple[str, str]:
    try:
        setup = ast.parse(setup_code).body
    except SyntaxError:
        return setup_code, ""  # as it is: the grader reports it broken, with the error
    return _preludes(setup, tests)


def _trusted_only(tasks: list[CodeTask], path: str | Path) -> list[CodeTask]:
    """The tasks with tests, every one of which the grader judges itself; warns about the others,
    left out."""
    kept = [t for t in tasks if t.hidden_tests and all(test.check is not None for test in t.hidden_tests)]
    left_out = [t.id for t in tasks if t not in kept]
    if left_out:
        warnings.warn(
            f"{path}: left out {len(left_out)} task(s) whose tests could not be split into probe and "
            "check (they would run beside the solution, which could forge them), or that have no test "
            f"of the solution but against itself: {', '.join(left_out)}",
            stacklevel=3,
        )
    return kept


def _humaneval_tests(test_module: str, entry: str) -> tuple[str, str, list[HiddenTest]]:
    """(prelude, check prelude, tests) from a HumanEval test module: everything but `check`'s
    assertions is prelude, and of that, the values only the checks use are the grader's alone."""
    tree = ast.parse(test_module)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        raise ValueError(f"the HumanEval test for {entry} defines no check(candidate)")
    setup = [n for n in tree.body if n is not check]
    param = check.args.args[0].arg if check.args.args else "candidate"
    body = [n for n in check.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    tests_itself = (ast.Assert, ast.For, ast.While, ast.If, ast.With, ast.Try)
    if any(not isinstance(n, tests_itself) and _uses(n, {param}) for n in body):
        # The solution's results flow through variables: keep the body whole, as one statement test.
        statements = ["\n".join(ast.unparse(n) for n in body)]
    else:
        statements = [ast.unparse(n) for n in body if _uses(n, {param})]  # asserts and loops over them
        setup += [n for n in body if not _uses(n, {param})]  # imports, helpers, inputs, expected values
    tests = _assertion_tests(statements, {param}, rename={param: entry})
    return (*_preludes(setup, tests), tests)


def _preludes(setup: list[ast.stmt], tests: list[HiddenTest]) -> tuple[str, str]:
    """(prelude, check prelude): the tests' set-up code, the values only the checks use set apart."""
    if any(t.check is None for t in tests):  # statement tests run beside the solution: they need it all
        return "\n".join(ast.unparse(n) for n in setup), ""
    shared, checks_only = _grader_only(setup, [t.probe for t in tests])
    return "\n".join(map(ast.unparse, shared)), "\n".join(map(ast.unparse, checks_only))


def _grader_only(setup: list[ast.stmt], probes: list[str]) -> tuple[list[ast.stmt], list[ast.stmt]]:
    """(shared, grader-only): an assignment whose names no probe needs, even through another shared
    statement (`odd_sum = sum(...)`, HumanEval/151), is the checks' alone. The solution runs beside the
    probes and can read every name of their namespace from its caller's frame, so such a value must not
    be there. Order is kept within each part; a value that a later shared statement would rebind stays
    shared, since the grader runs all the shared part first."""
    needed = {n.id for p in probes for n in ast.walk(ast.parse(p)) if isinstance(n, ast.Name)}
    rebound: set[str] = set()
    shared: list[ast.stmt] = []
    checks_only: list[ast.stmt] = []
    for node in reversed(setup):
        binds = _assigned(node)
        loads = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        if binds is not None and not binds & needed and not (loads - binds) & rebound:
            checks_only.insert(0, node)
            continue
        shared.insert(0, node)
        needed |= loads
        rebound |= _bound(node)
    return shared, checks_only


def _bound(node: ast.stmt) -> set[str]:
    """Every name a statement may bind (a superset: a definition's own locals are counted too)."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        names.add(node.name)
    if isinstance(node, ast.Import | ast.ImportFrom):
        names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _assigned(node: ast.stmt) -> set[str] | None:
    """The names a plain assignment binds; None for anything else (imports, definitions, mutations)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    else:
        return None
    names = [n for t in targets for n in ast.walk(t)]
    if not all(isinstance(n, ast.Name | ast.Tuple | ast.List | ast.Store) for n in names):
        return None  # `x[0] = ...`, `x.a = ...`: a mutation of what the probes may share
    return {n.id for n in names if isinstance(n, ast.Name)}


def _assertion_tests(
    statements: list[str], solution_names: set[str], rename: dict[str, str] | None = None
) -> list[HiddenTest]:
    rename = rename or {}
    tests: list[HiddenTest] = []
    unrolled = [t for statement in statements for t in _unrolled(statement)]
    testing = [t for t in unrolled if _uses(ast.parse(t), solution_names)]  # `assert True` tests nothing
    for text in testing:
        body = ast.parse(text).body
        name = f"test-{len(tests)}"
        split = (
            _split(body[0], solution_names) if len(body) == 1 and isinstance(body[0], ast.Assert) else None
        )
        if split is None:
            aliases = "".join(f"{old} = {new}\n" for old, new in rename.items())
            tests.append(HiddenTest(name=name, probe=aliases + text, check=None, source=text))
            continue
        probes, check = split
        calls = [ast.unparse(_Rename(rename).visit(p)) for p in probes]
        if len(calls) > 1 and len(set(calls)) == 1:
            continue  # the solution compared with itself (HumanEval/33): any answer, a constant too, holds
        probe = calls[0] if len(calls) == 1 else f"({', '.join(calls)},)"
        tests.append(HiddenTest(name=name, probe=probe, check=check, source=text))
    return tests


def _unrolled(statement: str) -> list[str]:
    """`for x in <literal values>: <assertions>` as one assertion per value; anything else unchanged.

    Only literals (and `range` of literals) are unrolled: the loader runs no test code on the host.
    """
    body = ast.parse(statement).body
    loop = body[0] if len(body) == 1 else None
    if not isinstance(loop, ast.For) or loop.orelse or not all(isinstance(n, ast.Assert) for n in loop.body):
        return [statement]
    values = _literal_values(loop.iter)
    targets = [loop.target] if isinstance(loop.target, ast.Name) else getattr(loop.target, "elts", None)
    if values is None or not targets or not all(isinstance(t, ast.Name) for t in targets):
        return [statement]
    unrolled = []
    for value in values:
        items = (value,) if isinstance(loop.target, ast.Name) else value
        if not isinstance(items, tuple | list) or len(items) != len(targets):
            return [statement]
        bound = {t.id: v for t, v in zip(targets, items, strict=True) if isinstance(t, ast.Name)}
        for node in loop.body:
            unrolled.append(ast.unparse(_Bind(bound).visit(ast.parse(ast.unparse(node)).body[0])))
    return unrolled


def _literal_values(node: ast.expr) -> list[object] | None:
    """The values of a literal iterable or of `range(<int literals>)`; None for anything computed."""
    try:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
            if node.keywords:
                return None
            value: object = range(*(int(ast.literal_eval(a)) for a in node.args))
        else:
            value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None
    if isinstance(value, range | list | tuple | set | frozenset | str) and len(value) <= MAX_UNROLLED:
        return list(value)
    return None


class _Bind(ast.NodeTransformer):
    """Replace the loop's variables by the literal values of one iteration."""

    def __init__(self, values: dict[str, object]) -> None:
        self.values = values

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in self.values and isinstance(node.ctx, ast.Load):
            return ast.parse(repr(self.values[node.id]), mode="eval").body
        return node


def _uses(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.names.get(node.id, node.id), node.ctx)


class _Probes(ast.NodeTransformer):
    """Replace each outermost call of the solution by `result` (or `result[i]`), collecting the calls."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.calls: list[ast.Call] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Name) and node.func.id in self.names:
            self.calls.append(node)
            return ast.Name(f"__probe_{len(self.calls) - 1}", ast.Load())
        return self.generic_visit(node)


def _split(node: ast.Assert, names: set[str]) -> tuple[list[ast.Call], str] | None:
    """(probe calls, check) for `assert <expr>`, or None when the solution is used other than by calls."""
    finder = _Probes(names)
    expr = finder.visit(ast.parse(ast.unparse(node.test), mode="eval").body)
    if not finder.calls or _uses(expr, names):
        return None
    if any(isinstance(n, ast.Lambda | ast.comprehension | ast.NamedExpr) for n in ast.walk(expr)):
        return None  # names bound inside the assertion could not reach the probe
    check = ast.unparse(expr)
    if len(finder.calls) == 1:
        return finder.calls, check.replace("__probe_0", "result")
    for i in reversed(range(len(finder.calls))):  # __probe_10 before __probe_1
        check = check.replace(f"__probe_{i}", f"result[{i}]")
    return finder.calls, check
