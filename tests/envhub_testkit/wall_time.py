"""Where the suite's time goes: wall time per test directory, printed at the end of a run.

`make test` runs the main suite for half an hour; the table says which part of the package costs what, so a
slow directory is seen the day it slows rather than when CI's 90-minute limit is hit. The time of a test is
its setup, call and teardown (pytest's own `duration`); a module's fixtures count for the test that first
needed them. `--wall-time-file PATH` also writes the table to PATH, so `make test` can print it again after
its other targets (the shared-host, vLLM and verifiers suites) have run.

Loaded by the root conftest.py for every suite in the repository.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest


@dataclass
class DirectoryTime:
    """What one test directory cost: seconds and tests, and how many failed."""

    seconds: float = 0.0
    tests: set[str] = field(default_factory=set)
    failed: int = 0


_TIMES: defaultdict[str, DirectoryTime] = defaultdict(DirectoryTime)
_STARTED = time.monotonic()


def directory_of(nodeid: str) -> str:
    """`tests/sandbox/test_local.py::test_x[a]` -> `tests/sandbox`: the directory a test's file sits in."""
    path = nodeid.split("::", 1)[0]
    parent = PurePosixPath(path).parent
    return str(parent) if str(parent) != "." else "(root)"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--wall-time-file", default=None, help="also write the wall time per test directory to this file"
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    global _STARTED
    _STARTED = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _TIMES[directory_of(report.nodeid)]
    entry.seconds += report.duration
    entry.tests.add(report.nodeid)
    if report.failed:
        entry.failed += 1


def render(total_s: float) -> list[str]:
    """The table, slowest directory first, with each one's share of the run."""
    rows = sorted(_TIMES.items(), key=lambda item: item[1].seconds, reverse=True)
    width = max([len("directory"), *(len(name) for name, _ in rows)])
    lines = [f"{'directory':<{width}}  {'tests':>5}  {'failed':>6}  {'wall':>9}  {'share':>5}"]
    for name, entry in rows:
        share = entry.seconds / total_s if total_s > 0 else 0.0
        tests, clock = len(entry.tests), _clock(entry.seconds)
        lines.append(f"{name:<{width}}  {tests:>5}  {entry.failed:>6}  {clock:>9}  {share:>5.0%}")
    in_tests = sum(entry.seconds for entry in _TIMES.values())
    lines.append(
        f"{'all':<{width}}  {sum(len(e.tests) for e in _TIMES.values()):>5}  "
        f"{sum(e.failed for e in _TIMES.values()):>6}  {_clock(in_tests):>9}  "
        f"(the session took {_clock(total_s)}; the rest is collection and start-up)"
    )
    return lines


def _clock(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{seconds:.1f}s"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if not _TIMES:
        return
    lines = render(time.monotonic() - _STARTED)
    terminalreporter.section("wall time per test directory")
    for line in lines:
        terminalreporter.write_line(line)
    target = config.getoption("--wall-time-file")
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_text("\n".join(lines) + "\n")
