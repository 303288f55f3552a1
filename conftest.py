"""The suite's skip policy: every skip is listed with its reason at the end of a run, and with
`--strict-skips` (what `make test`, and so CI, passes) a skip that is not on the allow-list fails the run.

A skip hides a test that did not run; the usual cause is a missing prerequisite that `make test` should
have installed. Only what this kind of machine cannot have may skip.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parent
"""On the path for every suite, whatever pytest's import mode: `tests.envhub_testkit` is what tests/ and
envs/*/tests share that plugin authors do not need (what they do is in `envhub.testing`)."""
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest_plugins = ["tests.envhub_testkit.wall_time"]
"""The wall time per test directory, printed at the end of every run (tests/envhub_testkit/wall_time.py)."""

collect_ignore_glob = ["tests/data/*"]
"""Data the tests use, not tests: Harbor task folders hold the tasks' own `tests/test_*.py`, which run
inside their sandboxes (where their imports resolve), never in this suite."""


@dataclass(frozen=True)
class AllowedSkip:
    """A skip reason (regex) that does not fail a strict run, and why it may happen."""

    pattern: str
    why: str
    in_ci: bool = True
    """False: allowed on a developer's machine only; in CI (CI=true) the skip fails the run."""


ALLOWED_SKIPS = (
    AllowedSkip(r"\bneeds a GPU\b", "hardware: CI's machines and most developers' have no GPU"),
    AllowedSkip(
        r"^SWE-bench Lite is not at ",
        "data: the rows are not in the repository; CI has them in shared/ beside the clone",
        in_ci=False,
    ),
)

_SKIPS: list[tuple[str, str]] = []  # (test id, reason), in the order they ran


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--strict-skips",
        action="store_true",
        help="fail the run on a skip that is not on the allow-list in the root conftest.py",
    )


def skip_reason(report: pytest.TestReport) -> str:
    """The reason given to `pytest.skip`, a skipif mark or `importorskip`."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def allowed(reason: str, *, ci: bool) -> AllowedSkip | None:
    """The allow-list entry that covers `reason` on this machine, if any."""
    for entry in ALLOWED_SKIPS:
        if re.search(entry.pattern, reason) and (entry.in_ci or not ci):
            return entry
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):  # an xfail reports as skipped too
        _SKIPS.append((report.nodeid, skip_reason(report)))


def _disallowed() -> list[tuple[str, str]]:
    ci = os.environ.get("CI") == "true"
    return [(node, reason) for node, reason in _SKIPS if allowed(reason, ci=ci) is None]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if not _SKIPS:
        return
    terminalreporter.section(f"{len(_SKIPS)} skipped, each with its reason")
    bad = set(_disallowed())
    for node, reason in _SKIPS:
        mark = "NOT ALLOWED" if (node, reason) in bad else "allowed"
        terminalreporter.write_line(f"{mark:11s} {node}: {reason}")
    if bad and config.getoption("--strict-skips"):
        terminalreporter.write_line(
            f"{len(bad)} skip(s) not on the allow-list (ALLOWED_SKIPS in conftest.py): the run fails. "
            "A skip usually means a prerequisite is missing: `make test` installs them as root."
        )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.getoption("--strict-skips") and _disallowed() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
