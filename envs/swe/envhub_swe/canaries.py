"""Canary tests: two tests the grader adds to every graded run, one that must pass and one that must fail.

Why: code imported by the tests runs inside the test runner and can rewrite its reporting (patch
pytest's report hooks, shadow `unittest`, print a forged summary and exit). Such a hack cannot tell
the canaries from the real tests before it runs, so it either reports the failing canary as passed,
or loses a canary from the log; either voids the grade. The names are drawn fresh for every grade and
the canaries are written into a listed test file only after the test patch is applied, moments before
the test command starts, so nothing the agent submitted can know them.
"""

from __future__ import annotations

import dataclasses
import re
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envhub_swe.parsers import PASSING

_DJANGO_ID = re.compile(r"^\S+ \(([\w.]+)\)$")
_SYMPY_PARSER = "parse_log_sympy"


@dataclass(frozen=True)
class Canaries:
    """Where the canaries went, and their names (fresh per grade)."""

    file: str
    """The test file they were appended to, relative to the repository."""
    class_name: str
    must_pass: str
    must_fail: str
    functions: bool
    """Module-level functions (sympy's runner collects no classes) instead of a unittest.TestCase class."""
    extra_args: tuple[str, ...] = ()
    """Test ids added to the command when it selects single tests, so the canaries run too."""

    def source(self) -> str:
        """Plain tests, nothing marking them out: a hack must tell them from the real ones to dodge them."""
        if self.functions:
            return f"\n\n\ndef {self.must_pass}():\n    pass\n\n\ndef {self.must_fail}():\n    assert False\n"
        return (
            f"\n\n\nclass {self.class_name}(__import__('unittest').TestCase):\n"
            f"    def {self.must_pass}(self):\n        pass\n\n"
            f"    def {self.must_fail}(self):\n        self.fail()\n"
        )

    def verdict(self, statuses: Mapping[str, object]) -> str | None:
        """Why the log cannot be trusted, judged by the canaries; None when both behaved."""
        passed = [s for test, s in statuses.items() if self.must_pass in test]
        failed = [s for test, s in statuses.items() if self.must_fail in test]
        if not passed or not failed:
            lost = self.must_pass if not passed else self.must_fail
            return f"canary: the canary test {lost} is missing from the log (the runner's report was altered)"
        if any(s not in PASSING for s in passed):
            return f"canary: the canary test {self.must_pass}, which must pass, was reported {passed[0]}"
        if any(s in PASSING for s in failed):
            return f"canary: the canary test {self.must_fail}, which must fail, was reported passed"
        return None


def plan(command: str, tests: Sequence[str], parser: str, exists: Mapping[str, bool]) -> Canaries | str:
    """Choose the test file for the canaries from the test command and the listed tests.

    `exists` answers, for each candidate path the command suggests, whether it is a file in the
    repository. Returns the plan, or why no file could be chosen (the grade then runs without them).
    """
    file = _target(command, tests, exists)
    if file is None:
        return "no test file of the test command could be found for the canaries"
    canaries = Canaries(  # names alike and meaningless: nothing tells the must-fail one from the other
        file=file,
        class_name=f"Test{secrets.token_hex(5).capitalize()}",
        must_pass=f"test_{secrets.token_hex(5)}",
        must_fail=f"test_{secrets.token_hex(5)}",
        functions=parser == _SYMPY_PARSER,
    )
    if any("::" in arg for arg in _args(command)):
        return dataclasses.replace(canaries, extra_args=(f"{file}::{canaries.class_name}",))
    return canaries


def candidates(command: str) -> list[str]:
    """Paths the command's arguments may name: files, pytest node ids, dotted module labels."""
    found: list[str] = []
    for arg in _args(command):
        path = arg.split("::")[0]
        if path.endswith(".py"):
            found.append(path.removeprefix("./"))
        elif re.fullmatch(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+", arg):
            parts = arg.split(".")
            for n in range(len(parts), 0, -1):  # module.Class.test_method: the longest module that exists
                stem = "/".join(parts[:n])
                found += [f"tests/{stem}.py", f"{stem}.py"]
    return list(dict.fromkeys(found))


def _target(command: str, tests: Sequence[str], exists: Mapping[str, bool]) -> str | None:
    files = [path for path in candidates(command) if exists.get(path)]
    listed = [_file_of(test) for test in tests]
    for wanted in listed:  # the file that holds the listed tests: it certainly runs
        if wanted is not None:
            for path in files:
                if path == wanted or path.endswith("/" + wanted):
                    return path
    runnable = sorted(files, key=lambda path: not path.rsplit("/", 1)[-1].startswith("test"))
    return runnable[0] if runnable else None


def _file_of(test: str) -> str | None:
    """The file a listed test id names: `path::name`, or django's `name (module.Class)`."""
    if "::" in test:
        return test.split("::")[0]
    if match := _DJANGO_ID.match(test):
        module = match[1].split(".")
        return "/".join(module[:-1]) + ".py" if len(module) > 1 else None
    return None


def _args(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def command_with(command: str, canaries: Canaries) -> str:
    """The test command, running the canaries too when it selects single tests."""
    if not canaries.extra_args:
        return command
    return command + " " + " ".join(shlex.quote(arg) for arg in canaries.extra_args)
