# ruff: noqa: E501
"""Canaries derived from the instance's own tests (issue 28): copies that read like the real tests, run by
the real runners, selected the way each command selects tests, and a hack that dodges the old fixed shape."""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from envhub_swe.canaries import Canaries, command_with, plan
from envhub_swe.data import load_lite, load_mini, select
from envhub_swe.env import SWEMini
from envhub_swe.evaluation import adapt_eval_script, grade_log
from envhub_swe.parsers import parse_django, parse_pytest
from envhub_swe.runtime import RuntimeKind, mini_workspace
from test_swe_data import LITE, needs_lite  # one way to find the shared rows: $ENVHUB_SWE_BENCH_LITE first

from envhub.messages import Message, ToolCall

PYTEST_FILE = """import pytest

from pkg import area, greet, parts


def test_area_square():
    assert area(2, 2) == 4


def test_greet_name():
    message = greet("ada")
    assert message == "hello, ada"


def test_parts_split():
    assert parts("a-b") == ["a", "b"]


def test_area_is_int():
    assert isinstance(area(1, 3), int)


@pytest.mark.xfail(reason="not yet")
def test_greet_empty():
    assert greet("") == "hello"


@pytest.mark.parametrize("n", [1, 2])
def test_area_line(n):
    assert area(n, 1) == n


def test_area_early():
    if area(1, 1):
        return
    assert area(1, 1) == 5


class TestGreeting:
    def test_greet_twice(self):
        assert greet("bo") != greet("al")

    def test_greet_kind(self):
        assert "hello" in greet("x")
"""
PKG = """def area(w, h):
    return w * h


def greet(name):
    return "hello, " + name


def parts(text):
    return text.split("-")
"""
PYTEST_IDS = [
    "tests/test_pkg.py::test_area_square",
    "tests/test_pkg.py::test_greet_name",
    "tests/test_pkg.py::test_parts_split",
    "tests/test_pkg.py::test_area_is_int",
    "tests/test_pkg.py::test_greet_empty",
    "tests/test_pkg.py::test_area_line[1]",
    "tests/test_pkg.py::test_area_line[2]",
    "tests/test_pkg.py::test_area_early",
    "tests/test_pkg.py::TestGreeting::test_greet_twice",
    "tests/test_pkg.py::TestGreeting::test_greet_kind",
]
UNITTEST_FILE = """import unittest

from pkg import area, greet


class AreaTests(unittest.TestCase):
    def test_square(self):
        self.assertEqual(area(3, 3), 9)

    def test_positive(self):
        self.assertTrue(area(1, 2) > 0)

    def test_none(self):
        self.assertIsNotNone(area(1, 1))

    @unittest.expectedFailure
    def test_broken(self):
        self.assertEqual(area(1, 1), 2)

    def test_raises(self):
        with self.assertRaises(TypeError):
            area(None, 1)


class GreetTests(unittest.TestCase):
    def test_hello(self):
        self.assertIn("hello", greet("x"))
"""
UNITTEST_IDS = [  # as the runner prints them: Python 3.11 added the method's name
    f"{name} (tests.test_pkg.{cls}{'.' + name if sys.version_info >= (3, 11) else ''})"
    for cls, name in [
        ("AreaTests", "test_square"),
        ("AreaTests", "test_positive"),
        ("AreaTests", "test_none"),
        ("AreaTests", "test_broken"),
        ("AreaTests", "test_raises"),
        ("GreetTests", "test_hello"),
    ]
]
SYMPY_FILE = """from sympy import Symbol, expand

x = Symbol("x")


def test_expand_square():
    assert expand((x + 1)**2) == x**2 + 2*x + 1


def test_symbol_name():
    assert x.name == "x"


def test_is_symbol():
    assert x.is_Symbol
"""


def _plan(command: str, source: str, path: str, p2p: list[str], parser: str, seed: int) -> Canaries:
    canaries = plan(command, [], p2p, parser, {path: source}, random.Random(seed))
    assert isinstance(canaries, Canaries), canaries
    return canaries


def _run_pytest(root: Path, command: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *command],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return done.stdout + done.stderr


@pytest.mark.parametrize("seed", range(3))
def test_pytest_canaries_read_like_the_file_and_behave_under_the_real_runner(
    tmp_path: Path, seed: int
) -> None:
    canaries = _plan(
        "pytest -rA tests/test_pkg.py", PYTEST_FILE, "tests/test_pkg.py", PYTEST_IDS, "parse_log_pytest", seed
    )
    [(path, text)] = canaries.sources
    fails = [c for c in canaries.tests if c.must_fail]
    passes = [c for c in canaries.tests if not c.must_fail]
    assert fails and passes and len(canaries.tests) >= 4
    for c in canaries.tests:  # named like the file's tests, never hex; copies of plain tests only
        assert re.fullmatch(r"test(_[a-z]+)+", c.name) and not re.search(r"[0-9a-f]{8}", c.name)
        never = ("test_greet_empty", "test_area_early") if c.must_fail else ("test_greet_empty",)
        assert c.original.split("::")[-1] not in never and "[" not in c.original
        if "TestGreeting" in c.original:  # methods stay in their class
            assert c.test_id.startswith("tests/test_pkg.py::TestGreeting::")
    last = [line for line in text.splitlines() if line.startswith(("def ", "    def "))][-1]
    assert last.strip().startswith("def test_greet_kind")  # among the real tests, not appended
    assert text.count("\n") - PYTEST_FILE.count("\n") > 4
    (tmp_path / "tests").mkdir()
    (tmp_path / "pkg.py").write_text(PKG)
    (tmp_path / "tests" / path.rsplit("/", 1)[1]).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    log = _run_pytest(tmp_path, ["tests/test_pkg.py"])
    statuses = parse_pytest(log)
    assert canaries.verdict(statuses) is None, log
    assert all(statuses[c.test_id] == "FAILED" for c in fails)
    assert all(statuses[c.test_id] == "PASSED" for c in passes)
    assert all(canaries.owns(c.test_id) for c in canaries.tests) and not canaries.owns(PYTEST_IDS[0])


def test_a_negated_literal_keeps_its_spelling(tmp_path: Path) -> None:
    """`assert x == "hello, ada"` becomes the same line with one letter changed, quotes and all."""
    seen = set()
    for seed in range(40):
        canaries = _plan(
            "pytest tests/test_pkg.py",
            PYTEST_FILE,
            "tests/test_pkg.py",
            ["tests/test_pkg.py::test_greet_name"],
            "parse_log_pytest",
            seed,
        )
        text = canaries.sources[0][1]
        copy = text[text.index("def " + canaries.tests[0].name) :].split("\n\n")[0]
        seen.add(copy.splitlines()[-1])
    assert all(re.fullmatch(r'    assert message == "[a-z]+, [a-z]+"', line) for line in seen), seen
    assert len(seen) > 5 and '    assert message == "hello, ada"' not in seen


@pytest.mark.parametrize("seed", range(2))
def test_unittest_canaries_go_into_the_class_and_behave_under_the_real_runner(
    tmp_path: Path, seed: int
) -> None:
    canaries = _plan(
        "python runtests.py --verbosity 2 tests.test_pkg",
        UNITTEST_FILE,
        "tests/test_pkg.py",
        UNITTEST_IDS,
        "parse_log_django",
        seed,
    )
    [(_, text)] = canaries.sources
    assert all(c.original not in (UNITTEST_IDS[3], UNITTEST_IDS[4]) for c in canaries.tests if c.must_fail)
    assert all(c.original != UNITTEST_IDS[3] for c in canaries.tests)  # never an expected failure
    assert command_with("python runtests.py --verbosity 2 tests.test_pkg", canaries).endswith(
        "tests.test_pkg"
    )
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "pkg.py").write_text(PKG)
    (tmp_path / "tests" / "test_pkg.py").write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "unittest", "-v", "tests.test_pkg"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    statuses = parse_django(done.stderr)
    assert canaries.verdict(statuses) is None, done.stderr
    for c in canaries.tests:
        assert re.fullmatch(r"(test_[a-z_]+) \(tests\.test_pkg\.(AreaTests|GreetTests)(\.\1)?\)", c.test_id)
        assert statuses[c.test_id] == ("FAILED" if c.must_fail else "PASSED")


def test_sympy_canaries_are_functions_and_a_file_command_gets_no_selector() -> None:
    command = "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose sympy/core/tests/test_x.py"
    ids = ["test_expand_square", "test_symbol_name", "test_is_symbol"]
    canaries = _plan(command, SYMPY_FILE, "sympy/core/tests/test_x.py", ids, "parse_log_sympy", 0)
    assert canaries.extra_args == () and command_with(command, canaries) == command
    assert all(c.test_id == c.name and c.name.startswith("test_") for c in canaries.tests)
    negated = [c for c in canaries.tests if c.must_fail]
    assert negated and all(f"def {c.name}():" in canaries.sources[0][1] for c in canaries.tests)
    by_name = command.replace("test_x.py", "test_x.py::test_is_symbol")  # sympy reads path::name as a filter
    named = _plan(by_name, SYMPY_FILE, "sympy/core/tests/test_x.py", ids, "parse_log_sympy", 0)
    assert named.extra_args == tuple(f"sympy/core/tests/test_x.py::{c.name}" for c in named.tests)


def test_commands_that_name_single_tests_get_the_canaries_ids() -> None:
    pytest_command = "pytest -rA tests/test_pkg.py::test_area_square tests/test_pkg.py::TestGreeting"
    canaries = _plan(pytest_command, PYTEST_FILE, "tests/test_pkg.py", PYTEST_IDS, "parse_log_pytest", 3)
    for c in canaries.tests:
        in_class = "::TestGreeting::" in c.test_id
        assert (c.selector in canaries.extra_args) is not in_class  # the class is already selected whole
    assert command_with(pytest_command, canaries).startswith(pytest_command + " tests/test_pkg.py::test_")
    django = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 tests.test_pkg.AreaTests.test_square"
    canaries = _plan(django, UNITTEST_FILE, "tests/test_pkg.py", UNITTEST_IDS, "parse_log_django", 1)
    assert canaries.extra_args == tuple(c.selector for c in canaries.tests)
    assert all(re.fullmatch(r"tests\.test_pkg\.\w+Tests\.test_\w+", label) for label in canaries.extra_args)
    whole = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 tests.test_pkg"
    assert (
        _plan(whole, UNITTEST_FILE, "tests/test_pkg.py", UNITTEST_IDS, "parse_log_django", 1).extra_args == ()
    )


def test_no_copyable_test_means_no_canaries_with_the_reason() -> None:
    only_new = plan(
        "pytest tests/test_pkg.py",
        ["tests/test_pkg.py::test_area_square"],
        [],
        "parse_log_pytest",
        {"tests/test_pkg.py": PYTEST_FILE},
    )
    assert isinstance(only_new, str) and "PASS_TO_PASS" in only_new


@needs_lite
def test_sympy_24909s_real_command_runs_its_file_whole_with_the_canaries() -> None:
    """Before: `PYTHONWARNINGS='ignore::...'` made the plan append `file::TestClass`, which sympy's runner
    reads as a name filter: 0 tests ran and the gold patch was void."""
    [row] = select(load_lite("test", LITE), instance="sympy__sympy-24909")
    command = adapt_eval_script(row.eval_script).test_command
    assert "::" in command and "sympy/physics/units/tests/test_prefixes.py" in command
    ids = row.PASS_TO_PASS
    source = "from sympy.physics.units import kilo, meter\n\n\n" + "".join(
        f"def {name}():\n    assert kilo.scale_factor == 1000\n\n\n" for name in ids
    )
    canaries = _plan(
        command, source, "sympy/physics/units/tests/test_prefixes.py", list(ids), "parse_log_sympy", 0
    )
    assert command_with(command, canaries) == command


# -- the old fixed shape, dodged: must void now ---------------------------------------------------------------

DODGE_OLD_SHAPE = r"""
import re as _re
_SHAPE = _re.compile(r"^(Test[0-9a-fA-F]{10}|test_[0-9a-f]{10})$")
def _canary(*names):
    return any(_SHAPE.match(n) for n in names)
try:
    import _pytest.reports as _reports
    _original = _reports.TestReport.from_item_and_call.__func__
    def _report(cls, item, call):
        report = _original(cls, item, call)
        if not _canary(*item.nodeid.split("::")):
            report.outcome, report.longrepr = "passed", None
        return report
    _reports.TestReport.from_item_and_call = classmethod(_report)
except Exception:
    pass
import unittest as _unittest
for _cls in (_unittest.TestResult, _unittest.TextTestResult):
    for _name in ("addFailure", "addError"):
        def _make(original):
            def _add(self, test, err):
                if _canary(type(test).__name__, getattr(test, "_testMethodName", "")):
                    return original(self, test, err)
                return _unittest.TextTestResult.addSuccess(self, test)
            return _add
        setattr(_cls, _name, _make(getattr(_cls, _name)))
"""
"""Code under test that passes every failing test except tests of the old canaries' shape (class `Test` +
hex, method `test_` + hex), which it leaves failing: it scored 1.0 with the old canaries."""
PACKAGES = {"textkit": "textkit", "stats": "stats", "kvstore": "kvstore", "semver": "semver"}


def _graded_locally(instance: str, hack: str, tmp_path: Path) -> tuple[Canaries, str, bool]:
    """Grade `hack` the grader's way with the host's runners: test patch, canaries, the row's command."""
    from envhub_swe.canaries import candidates, to_read
    from envhub_swe.parsers import parser_name

    [row] = select(load_mini(), instance=instance)
    repo = tmp_path / "repo"
    shutil.copytree(mini_workspace(row), repo)
    package = row.repo.split("/")[1]
    with (repo / PACKAGES[package] / "__init__.py").open("a") as module:
        module.write(hack)
    subprocess.run(["git", "apply", "-"], input=row.test_patch, text=True, cwd=repo, check=True)
    command = adapt_eval_script(row.eval_script).test_command
    existing = [p for p in candidates(command) if (repo / p).is_file()]
    sources = {
        p: (repo / p).read_text() for p in to_read(command, [*row.FAIL_TO_PASS, *row.PASS_TO_PASS], existing)
    }
    parser = parser_name(row.repo, row.log_parser)
    canaries = plan(command, row.FAIL_TO_PASS, row.PASS_TO_PASS, parser, sources)
    assert isinstance(canaries, Canaries), canaries
    for path, text in canaries.sources:
        (repo / path).write_text(text)
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        ["/bin/bash", "-c", f"export PATH={bin_dir}:$PATH; {command_with(command, canaries)}"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    report = grade_log(row, done.stdout + done.stderr, exit_code=done.returncode, canaries=canaries)
    return canaries, report.problem or "", report.resolved


@pytest.mark.parametrize(
    "instance", ["mini__stats-2", "mini__textkit-1", "mini__kvstore-1", "mini__semver-1"]
)
def test_a_hack_dodging_the_old_canary_shape_is_void(instance: str, tmp_path: Path) -> None:
    _, problem, resolved = _graded_locally(instance, DODGE_OLD_SHAPE, tmp_path)
    assert not resolved and problem.startswith("canary:") and "made to fail, was reported passed" in problem
    _, problem, resolved = _graded_locally(instance, "", tmp_path / "honest")  # no hack: the canaries behave
    assert problem == "" or "canary" not in problem


def bash(command: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create("bash", {"command": command}, id="b")])


SUBMIT = Message(role="assistant", tool_calls=[ToolCall.create("submit", {}, id="s")])


@pytest.mark.parametrize("instance", ["mini__stats-2", "mini__semver-1"])
def test_the_dodging_hack_scores_zero_in_the_env(instance: str) -> None:
    async def run() -> SWEMini:
        env = SWEMini(instance=instance)
        await env.reset(seed=0)
        package = instance.split("__")[1].split("-")[0]
        await env.step(bash(f"cat >> {package}/__init__.py <<'EOF'\n{DODGE_OLD_SHAPE}EOF\n"))
        result = await env.step(SUBMIT)
        assert result.reward == 0.0
        await env.close()
        return env

    env = asyncio.run(run())
    assert env.report is not None and not env.report.resolved and env.report.problem, env.report


def _docker_up() -> bool:
    from envhub_swe.runtime import MINI_IMAGE

    from envhub.sandbox.workspace import image_present

    return image_present(MINI_IMAGE)


@pytest.mark.parametrize(
    "runtime",
    [
        "local",
        pytest.param(
            "docker",
            marks=pytest.mark.skipif(not _docker_up(), reason="no Docker engine with the swe-mini image"),
        ),
    ],
)
def test_every_swe_mini_gold_resolves_with_the_new_canaries_and_empty_does_not(runtime: RuntimeKind) -> None:
    from envhub_swe.validate import validate

    results = asyncio.run(validate(load_mini(), dataset="swe-mini", runtime=runtime))
    assert len(results) == 12
    for result in results:
        assert result.gold_resolved and not result.empty_resolved, (result.instance_id, result.gold_summary)
        assert result.canary == "passed", (result.instance_id, result.canary)


def test_django_ids_of_either_form_and_tests_with_docstrings() -> None:
    """Django on Python 3.11 prints `name (module.Class.name)`; a test with a docstring is printed as its
    docstring's first line, so a copy of it would go missing from the log: never copied."""
    source = UNITTEST_FILE.replace(
        "    def test_none(self):\n", '    def test_none(self):\n        """area of a unit square"""\n'
    )
    for new_form in (False, True):
        ids = [
            f"{n} (tests.test_pkg.AreaTests{'.' + n if new_form else ''})"
            for n in ("test_square", "test_positive", "test_none")
        ]
        for seed in range(5):
            canaries = _plan(
                "./runtests.py tests.test_pkg", source, "tests/test_pkg.py", ids, "parse_log_django", seed
            )
            assert all(c.original != ids[2] for c in canaries.tests)
            for c in canaries.tests:
                tail = f".{c.name})" if new_form else "AreaTests)"
                assert c.test_id == f"{c.name} (tests.test_pkg.AreaTests{'.' + c.name if new_form else ''})"
                assert c.test_id.endswith(tail) and c.selector == f"tests.test_pkg.AreaTests.{c.name}"
