"""No function in the library runs over 80 lines (issue 30): a function that long does several jobs, and
its reader has to hold them all at once. Split it by job; the test lists every offender with file:line.

`STILL_LONG` named the functions still being split while issue 30 ran (`path::qualname`); it is empty
now and only shrinks: a new long function is split, not listed, and the test fails on a listed function
that is short again, so whoever splits one deletes its entry in the same commit.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 80

STILL_LONG: frozenset[str] = frozenset()  # empty since issue 30's splits; it only shrinks


def library_files() -> list[Path]:
    """envhub/, each plugin's package and the trainer's: the code, not its tests."""
    roots = [
        ROOT / "envhub",
        ROOT / "trainer" / "envhub_trainer",
        *sorted((ROOT / "envs").glob("*/envhub_*")),
    ]
    return sorted(path for root in roots for path in root.rglob("*.py") if "tests" not in path.parts)


def functions(
    tree: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method with its qualified name (`Class.method`, `outer.inner`)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def long_functions() -> dict[str, str]:
    """`path::qualname` -> `path:line: qualname (N lines)` for every function over the limit."""
    found = {}
    for path in library_files():
        relative = path.relative_to(ROOT).as_posix()
        for name, node in functions(ast.parse(path.read_text(), filename=str(path))):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > LIMIT:
                found[f"{relative}::{name}"] = f"{relative}:{node.lineno}: {name} ({length} lines)"
    return found


def test_no_function_is_over_80_lines() -> None:
    long = long_functions()
    offenders = sorted(where for key, where in long.items() if key not in STILL_LONG)
    assert not offenders, f"functions over {LIMIT} lines (split them by job):\n" + "\n".join(offenders)


def test_the_list_of_long_functions_only_shrinks() -> None:
    short_again = sorted(STILL_LONG - set(long_functions()))
    assert not short_again, (
        "no longer over the limit (or gone); delete them from STILL_LONG in "
        "tests/architecture/test_function_length.py:\n" + "\n".join(short_again)
    )


def test_the_reader_sees_methods_and_nested_functions() -> None:
    """The reader itself: a long method or a long inner function counts, or the rule passes by not looking."""
    body = "\n".join(f"        x{i} = {i}" for i in range(LIMIT))
    source = (
        f"class A:\n    def m(self):\n{body}\n\ndef outer():\n    def inner():\n{body}\n    return inner\n"
    )
    names = {name: (node.end_lineno or 0) - node.lineno + 1 for name, node in functions(ast.parse(source))}
    assert names["A.m"] == LIMIT + 1
    assert names["outer.inner"] == LIMIT + 1
    assert names["outer"] > LIMIT
