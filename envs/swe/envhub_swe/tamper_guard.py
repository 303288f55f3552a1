"""The grader's side of the test-process guard (`guard/sitecustomize.py`): what the guard is told, how it
is loaded before any repository code, and what its signed report says about the run.

Why a guard: the canaries, the filter and the supervisor-observed exit status judge the log from
outside, but code imported by the tests runs inside the runner and can rewrite its reporting. The guard
sits inside the same process, loaded first, and records what such code does (see the guard's own
docstring and docs/rewards.md); the grader voids the log on any recorded event or a broken report.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

GUARD_DIR = Path(__file__).parent / "guard"
"""The host folder holding the guard's `sitecustomize.py`."""
SANDBOX_DIR = "/opt/envhub-guard"
"""Where the guard is seen inside a grading sandbox: a read-only bind (local) or a root-owned,
read-only folder (docker). First on PYTHONPATH, so Python imports it as `sitecustomize` at start-up."""
RUNNER_PATHS = (
    "_pytest/",
    "pytest/",
    "pluggy/",
    "django/test/",
    "sympy/testing/runtests",
    "sympy/utilities/runtests",
)
"""Where a repository keeps a test runner of its own (pytest's, django's, sympy's)."""


def runner_in_repo(submission: Iterable[str]) -> bool:
    """Whether the submission changes the test runner itself (pytest's repository, django's test
    package): its legitimate introspection then cannot be told from tampering, and the guard keeps only
    its snapshot checks and the events no runner needs (ctypes, gc walks)."""
    return any(f"/{marker}" in f"/{path}" for path in submission for marker in RUNNER_PATHS)


@dataclass(frozen=True)
class GuardRun:
    """One graded run's guard: its key, the files it reads and writes, and what it watches."""

    submission: tuple[str, ...]
    """Repository paths the graded patch changes or adds."""
    tests: tuple[str, ...]
    """Repository paths of the test files (the test patch's, the listed tests', the canaries')."""
    root: str = "/testbed"
    lines: Mapping[str, Sequence[int] | None] = field(default_factory=dict)
    """The lines of each submitted file that the submission added or changed (absent or None: every
    line): a submitted file's untouched lines are the repository's own code, trusted as such."""
    key: str = field(default_factory=lambda: secrets.token_hex(32))
    token: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def config_path(self) -> str:
        return f"/tmp/envhub-guard-{self.token}.json"

    @property
    def report_path(self) -> str:
        return f"/tmp/envhub-guard-{self.token}.log"

    def config(self) -> bytes:
        """Read once and deleted by the guard at start-up: nothing of it is left for the tests to find."""
        return json.dumps(
            {
                "key": self.key,
                "root": self.root,
                "report": self.report_path,
                "submission": list(self.submission),
                "lines": {path: None if lines is None else list(lines) for path, lines in self.lines.items()},
                "tests": list(self.tests),
                "runner_in_repo": runner_in_repo(self.submission),
            }
        ).encode()

    def shell_lines(self) -> list[str]:
        """Lines put just before the test command, after the eval script's own shell state (which may set
        PYTHONPATH): the guard goes first on the path and learns where its configuration is."""
        return [
            f'export PYTHONPATH="{SANDBOX_DIR}${{PYTHONPATH:+:$PYTHONPATH}}"',
            f"export ENVHUB_GUARD={self.config_path}",
        ]

    def verdict(self, report: bytes | None) -> tuple[str | None, list[str]]:
        """Why the run cannot be trusted (None when the guard saw nothing), and every event it recorded."""
        return judge(report, self.key)


def judge(report: bytes | None, key: str) -> tuple[str | None, list[str]]:
    """Read a guard report: a signed start, no event, and a signed end from the same process whose count
    matches, with no line missing between them. Anything else voids the run."""
    if not report:
        return (
            "guard: no report from the test process (the guard did not load, or its report was lost)",
            [],
        )
    lines: list[dict[str, object]] = []
    forged = 0
    for raw in report.decode(errors="replace").splitlines():
        mac, _, body = raw.partition(" ")
        good = hmac.new(bytes.fromhex(key), body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, good):
            forged += 1
            continue
        lines.append(json.loads(body))
    events = [str(line["text"]) for line in lines if line["kind"] == "event"]
    if events:
        return f"guard: {events[0]}" + (f" (and {len(events) - 1} more)" if len(events) > 1 else ""), events
    if forged:
        return f"guard: {forged} report lines were not written by the guard (forged or altered)", events
    starts = [line for line in lines if line["kind"] == "start"]
    if not starts:
        return "guard: the guard's start line is missing from its report (the report was altered)", events
    main = starts[0]["pid"]
    own = [line for line in lines if line["pid"] == main]
    if [line["seq"] for line in own] != list(range(len(own))):
        return "guard: lines of the guard's report are missing (it was truncated or redirected)", events
    if own[-1]["kind"] != "end":
        return (
            "guard: the test process ended before the guard's closing check (it exited early or was killed)",
            events,
        )
    closing = json.loads(str(own[-1]["text"]))
    if closing.get("events") != 0:
        return f"guard: the guard counted {closing.get('events')} events its report does not hold", events
    return None, events
