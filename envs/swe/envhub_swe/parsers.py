"""Per-repository test-log parsers with the official harness's semantics, and its known pitfalls fixed.

Each parser maps a test id (as FAIL_TO_PASS and PASS_TO_PASS spell it) to a status. The fixes, each
tested on a realistic log in `tests/test_parsers.py`:

- pytest: only the outer run's `short test summary info` counts, so the nested `FAILED ...` lines that
  pytest's own suite prints from the runs it starts cannot override a result; `ERROR:` lines (usage
  errors) are not test ids; `SKIPPED [1] file.py:3: reason` carries no id, so a skipped test is absent.
- django: `FAIL:`/`ERROR:` headers give the whole `name (module.Class)` id, not its first word.
- sympy: ids are bare function names that can collide across files; a name passes only if every file
  that ran it passed it.
- seaborn: `path::test PASSED` lines of `pytest -v` as well as `-rA` summaries.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import StrEnum


class Status(StrEnum):
    PASSED = "PASSED"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"
    XPASS = "XPASS"


PASSING = (Status.PASSED, Status.XFAIL)
"""The official harness counts an expected failure as a pass."""

StatusMap = dict[str, Status]
Parser = Callable[[str], StatusMap]

_ANSI = re.compile(r"\x1b\[[0-9;]*m|\[\d+m")
_PYTEST_RESULT = re.compile(r"^(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) ([^\s\[]\S*)")
_PYTEST_VERBOSE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
_PYTEST_SUMMARY = re.compile(r"^=+ short test summary info =+$")
PYTEST_FINAL = re.compile(
    r"^=+ .*\b(?:passed|failed|errors?|skipped|xfailed|xpassed|no tests ran)\b.* in [\d.]+(?:s| seconds).*=+$"
)
"""pytest's closing line, `==== 3 passed, 1 failed in 0.12s ====` (before pytest 5: `in 0.12 seconds`):
the run got to the end."""


def _clean(line: str) -> str:
    return _ANSI.sub("", line).rstrip("\r")


def _outer_summary(lines: list[str]) -> list[str]:
    """The lines of the outermost run's short summary; all lines when there is no summary."""
    headers = [i for i, line in enumerate(lines) if _PYTEST_SUMMARY.match(line)]
    if not headers:
        return lines
    return lines[headers[-1] + 1 :]


_PYTEST_PROGRESS = re.compile(r"^(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\s+(\[\S*)")
"""A live-logging line, `PASSED            [100%]`: the official parser takes its second word for a test
id, and the dataset lists such ids (`[100%]`, `[` in pytest-dev__pytest-5227's PASS_TO_PASS)."""


def parse_pytest(log: str, *, verbose_lines: bool = False, options: bool = False) -> StatusMap:
    """`pytest -rA`: `STATUS id` summary lines (`FAILED id - reason`)."""
    lines = [_clean(line) for line in log.splitlines()]
    results: StatusMap = {}
    for line in lines:  # the official reading of progress ids, the last line winning; a failing one
        progress = _PYTEST_PROGRESS.match(line)  # leaves the id out (not passed), never a failure
        if progress and Status(progress[1]) in PASSING:  # that could void an honest log
            results[progress[2]] = Status(progress[1])
        elif progress:
            results.pop(progress[2], None)
    for line in _outer_summary(lines):
        match = _PYTEST_RESULT.match(line)
        if match:
            results[_option_id(match[2]) if options else match[2]] = Status(match[1])
    if verbose_lines:  # older pytest, or -v without -rA: `id STATUS [ 10%]`
        for line in lines:
            verbose = _PYTEST_VERBOSE.match(line)
            if verbose and verbose[1] not in results:
                results[_option_id(verbose[1]) if options else verbose[1]] = Status(verbose[2])
    return results


def _option_id(test: str) -> str:
    """The official `pytest_options` rule: a path-like parametrisation keeps only its last part."""
    match = re.match(r"(.*?)\[(.*)\]$", test)
    if not match:
        return test
    main, option = match.groups()
    if option.startswith("/") and not option.startswith("//") and "*" not in option:
        option = "/" + option.split("/")[-1]
    return f"{main}[{option}]"


def parse_matplotlib(log: str) -> StatusMap:
    return parse_pytest(log.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3"))


def parse_seaborn(log: str) -> StatusMap:
    return parse_pytest(log, verbose_lines=True)


_DJANGO_LINE = re.compile(r"^(.+?) \.\.\. (ok|OK|FAIL|ERROR|skipped.*|expected failure|unexpected success)$")
_DJANGO_HEADER = re.compile(r"^(FAIL|ERROR): (\S+ \([\w.]+\))")
DJANGO_FINAL = re.compile(r"^Ran \d+ tests? in [\d.]+s$")
"""unittest's closing line: the run got to the end."""


def parse_django(log: str) -> StatusMap:
    """django's `runtests.py --verbosity 2` (and any unittest runner): `name (module.Class) ... ok`."""
    results: StatusMap = {}
    pending: str | None = None
    for raw in log.splitlines():
        line = _clean(raw).strip()
        if "--version is equivalent to version" in line:
            results["--version is equivalent to version"] = Status.PASSED
        match = _DJANGO_LINE.match(line)
        header = _DJANGO_HEADER.match(line)
        if match:
            test, word = match.groups()
            results[test] = _DJANGO_STATUS.get(word.split()[0], Status.SKIPPED)
            pending = None
        elif header:
            results[header[2]] = Status.FAILED if header[1] == "FAIL" else Status.ERROR
        elif " ... " in line:
            pending = line.split(" ... ")[0]  # the result word comes after the test's own output
        elif pending is not None and line in ("ok", "OK"):
            results[pending] = Status.PASSED
            pending = None
        elif pending is not None and line in ("FAIL", "ERROR"):
            results[pending] = Status(line.replace("FAIL", "FAILED"))
            pending = None
    return results


_DJANGO_STATUS = {
    "ok": Status.PASSED,
    "OK": Status.PASSED,
    "FAIL": Status.FAILED,
    "ERROR": Status.ERROR,
    "skipped": Status.SKIPPED,
    "expected": Status.XFAIL,
    "unexpected": Status.FAILED,
}

_SYMPY_FILE = re.compile(r"^(\S+\.py)\[\d+\]")
_SYMPY_TEST = re.compile(r"^(test_\w+) (ok|F|E|f|s|X|w|T)$")
_SYMPY_FAILURE = re.compile(r"^_+ (\S+\.py):(\w+) _+$")
SYMPY_FINAL = re.compile(
    r"^(=+ tests finished: .* in [\d.]+ seconds =+"  # one centred line
    r"|tests finished: [^\n=]*(\n[^\n=]*)*?\n[^\n=]*\bin [\d.]+ seconds)$",  # wrapped, no borders
    re.MULTILINE,
)
"""sympy's `bin/test` closing summary: the run got to the end. One centred line,
`= tests finished: 31 passed, 1 expected to fail, in 1.36 seconds =`, or, when it is wider than the
terminal, wrapped over several lines without the `=` borders (`tests finished: 32 passed, 1 failed, ...,`
then `in 1.32 seconds`)."""


def parse_sympy(log: str) -> StatusMap:
    """sympy's `bin/test -C --verbose`: `file.py[N]` headers, then `test_name ok|F|E` lines."""
    per_file: dict[tuple[str, str], Status] = {}
    current = ""
    for raw in log.splitlines():
        line = _clean(raw).strip()
        if header := _SYMPY_FILE.match(line):
            current = header[1]
        elif test := _SYMPY_TEST.match(line):
            words = {"ok": Status.PASSED, "F": Status.FAILED, "E": Status.ERROR, "f": Status.XFAIL}
            per_file[(current, test[1])] = words.get(test[2], Status.SKIPPED)
        elif failure := _SYMPY_FAILURE.match(line):
            per_file[(failure[1], failure[2])] = Status.FAILED
    results: StatusMap = {}
    for (file, name), outcome in per_file.items():
        results[f"{file}:{name}"] = outcome
        if results.get(name, Status.PASSED) in PASSING:  # a name passes only if it passed everywhere
            results[name] = outcome
    return results


PARSERS: dict[str, Parser] = {
    "parse_log_pytest": parse_pytest,
    "parse_log_pytest_v2": lambda log: parse_pytest(log, verbose_lines=True),
    "parse_log_pytest_options": lambda log: parse_pytest(log, options=True),
    "parse_log_astropy": lambda log: parse_pytest(log, verbose_lines=True),
    "parse_log_sphinx": lambda log: parse_pytest(log, verbose_lines=True),
    "parse_log_requests": lambda log: parse_pytest(log, options=True),
    "parse_log_pylint": lambda log: parse_pytest(log, options=True),
    "parse_log_scikit": parse_pytest,
    "parse_log_flask": parse_pytest,
    "parse_log_xarray": parse_pytest,
    "parse_log_matplotlib": parse_matplotlib,
    "parse_log_seaborn": parse_seaborn,
    "parse_log_django": parse_django,
    "parse_log_sympy": parse_sympy,
}
"""By the `log_parser` column's names; every name SWE-bench Lite uses is here."""

REPO_PARSERS = {
    "astropy/astropy": "parse_log_astropy",
    "django/django": "parse_log_django",
    "matplotlib/matplotlib": "parse_log_matplotlib",
    "mwaskom/seaborn": "parse_log_seaborn",
    "pallets/flask": "parse_log_flask",
    "psf/requests": "parse_log_requests",
    "pydata/xarray": "parse_log_xarray",
    "pylint-dev/pylint": "parse_log_pylint",
    "pytest-dev/pytest": "parse_log_pytest",
    "scikit-learn/scikit-learn": "parse_log_scikit",
    "sphinx-doc/sphinx": "parse_log_sphinx",
    "sympy/sympy": "parse_log_sympy",
}
"""For rows without a `log_parser` column: the harness's choice per repository."""


def parser_name(repo: str, log_parser: str = "") -> str:
    name = log_parser or REPO_PARSERS.get(repo, "")
    if name not in PARSERS:
        raise KeyError(f"no log parser for {repo!r} (log_parser={log_parser!r}); known: {', '.join(PARSERS)}")
    return name


def finished(name: str, log: str) -> bool:
    """Whether the runner printed its closing line: without it, no result in the log can be trusted."""
    if name == "parse_log_sympy":  # its summary may wrap over several lines
        return SYMPY_FINAL.search("\n".join(_clean(line).strip() for line in log.splitlines())) is not None
    final = DJANGO_FINAL if name == "parse_log_django" else PYTEST_FINAL
    return any(final.match(_clean(line).strip()) for line in log.splitlines())
