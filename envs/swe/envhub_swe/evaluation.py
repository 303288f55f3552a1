"""The official grading semantics, as pure functions over text: adapt the row's eval script, cut and
parse its log, and decide `resolved`. `runtime.py` runs the script; nothing here touches a sandbox.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from envhub_swe.canaries import Canaries
from envhub_swe.data import Instance
from envhub_swe.parsers import PARSERS, PASSING, Status, finished, parser_name

START = ">>>>> Start Test Output"
END = ">>>>> End Test Output"
_ACTIVATION = re.compile(r"^(source /opt/miniconda3/bin/activate|conda activate \S+)\s*$")
_REINSTALL = re.compile(r"^(python -m )?pip install\b.*|^python setup\.py (develop|install)\b.*")
_HEREDOC = re.compile(r"<<\s*'?(\w+)'?\s*$")
_SHELL_STATE = re.compile(
    r"^(set [-+][\w ]+|source \S+|conda activate \S+|\. \S+/activate|cd \S+|export \w+=\S*)\s*$"
)
"""Lines of the set-up that shape the shell the tests run in (options, activation, directory, variables)."""


@dataclass(frozen=True)
class EvalSteps:
    """The row's eval script in the two parts the grader runs as separate commands.

    `setup` resets the test files and applies the test patch; `test` is the test command, preceded
    by the set-up's shell state. Run apart, the test command's exit status is observed by the
    sandbox's supervisor (it is the process's own status), never read from output the tested code
    can write, and nothing of the grade is secret from the sandbox.
    """

    setup: str
    shell_state: tuple[str, ...]
    test_command: str

    def test_script(self, command: str | None = None) -> str:
        return "\n".join([*self.shell_state, command or self.test_command]) + "\n"


def adapt_eval_script(
    script: str,
    *,
    activation: str | None = None,
    testbed: str = "/testbed",
    skip_install: bool = False,
) -> EvalSteps:
    """The row's own eval script with only the runtime adapted, split at its test output markers.

    `activation` replaces the conda activation lines (None keeps them, for the official images);
    `testbed` replaces the `/testbed` path; `skip_install` drops the per-evaluation reinstall, which
    needs a package index. The lines after the end marker (which only reset the test files) are not run.
    """
    setup: list[str] = []
    heredoc: str | None = None
    lines = script.splitlines()
    for i, line in enumerate(lines):
        if heredoc is not None:  # the test patch itself: never rewritten
            setup.append(line)
            if line == heredoc:
                heredoc = None
            continue
        if START in line:
            return _steps(setup, lines[i + 1 :])
        if found := _HEREDOC.search(line):
            heredoc = found[1]
        if activation is not None and _ACTIVATION.match(line):
            if activation and activation not in setup:
                setup.append(activation)
            continue
        if skip_install and _REINSTALL.match(line):
            setup.append(": 'envhub: reinstall skipped, the environment is already installed'")
            continue
        if testbed != "/testbed":
            line = re.sub(r"/testbed\b", testbed, line)
        setup.append(line)
    raise ValueError("the eval script has no '>>>>> Start Test Output' marker; it is not an official script")


def _steps(setup: list[str], after_start: list[str]) -> EvalSteps:
    body = [line for line in after_start[: _index_of_end(after_start)] if line.strip()]
    if len(body) != 1:
        raise ValueError(f"the eval script's test section must be one command line, found {len(body)}")
    state = tuple(line for line in setup if _SHELL_STATE.match(line))
    return EvalSteps(setup="\n".join(setup) + "\n", shell_state=state, test_command=body[0])


def _index_of_end(lines: list[str]) -> int:
    for i, line in enumerate(lines):
        if END in line:
            return i
    raise ValueError("the eval script has no '>>>>> End Test Output' marker; it is not an official script")


def cut_test_output(log: str) -> str | None:
    """The merged log between the start and end markers (with `set -x` they arrive as `+ : '>>>>> ...'`)."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if START in line]
    ends = [i for i, line in enumerate(lines) if END in line]
    if not starts or not ends or ends[-1] < starts[0]:
        return None
    return "\n".join(lines[starts[0] + 1 : ends[-1]])


class TestOutcome(BaseModel):
    """How the listed tests of one kind (FAIL_TO_PASS or PASS_TO_PASS) fared."""

    model_config = ConfigDict(frozen=True)
    __test__ = False

    passed: list[str]
    failed: list[str]
    missing: list[str]
    """Listed but absent from the log: not run, or skipped (pytest -rA prints skips without the id)."""

    @property
    def fraction(self) -> float:
        total = len(self.passed) + len(self.failed) + len(self.missing)
        return len(self.passed) / total if total else 1.0


class GradeReport(BaseModel):
    """One graded submission: the verdict, and everything it rests on."""

    model_config = ConfigDict(frozen=True)

    instance_id: str
    resolved: bool
    fail_to_pass: TestOutcome
    pass_to_pass: TestOutcome
    problem: str | None = None
    """Why the log could not be trusted (scored 0 whatever it says), or why grading could not run."""
    test_exit_code: int | None = None
    """The test command's exit status, as the sandbox's supervisor observed it (None: it never ran)."""
    canary: str = ""
    """`passed` (every canary test behaved), `void` (see `problem`), or why no canaries ran."""
    patch: str = ""
    """The submission as graded: the patch taken from the agent's files, before filtering."""
    dropped_files: list[str] = []
    """Files of the submission left out of grading: tests, test configuration, shadowing modules."""
    dropped_reasons: dict[str, str] = {}
    """Why each dropped file was left out (`patches.Guard.reason`)."""
    monitor: list[str] = []
    """The diff monitor's flags (`monitor.scan`): added lines of graded files that reach into the test
    machinery, `path:line: what it does: the line`. The env scores a flagged submission 0 by default."""
    guard_events: list[str] = []
    """What the test-process guard recorded the submission's code doing (any event voids the log)."""
    parser: str = ""
    runtime: str = ""
    duration_s: float = 0.0
    log: str = ""

    def summary(self) -> str:
        f, p = self.fail_to_pass, self.pass_to_pass
        parts = [
            "resolved" if self.resolved else "not resolved",
            f"FAIL_TO_PASS {len(f.passed)}/{len(f.passed) + len(f.failed) + len(f.missing)}",
            f"PASS_TO_PASS {len(p.passed)}/{len(p.passed) + len(p.failed) + len(p.missing)}",
        ]
        missing = len(f.missing) + len(p.missing)
        if missing:
            parts.append(
                f"{missing} listed tests missing from the log (not run or skipped), counted as not passed"
            )
        if self.problem:
            parts.append(f"void: {self.problem}")
        return "; ".join(parts)


def _outcome(tests: Sequence[str], statuses: dict[str, object], void: bool) -> TestOutcome:
    passed = [t for t in tests if not void and statuses.get(t) in PASSING]
    missing = [t for t in tests if t not in statuses]
    failed = [t for t in tests if t not in passed and t not in missing]
    return TestOutcome(passed=passed, failed=failed, missing=missing)


# pytest: 0 all passed, 1 some failed; 2 interrupted, 3 internal error, 4 usage error, 5 no tests.
# unittest runners and sympy: 0 or 1. Anything else means the run itself broke.
_GOOD_EXITS = (0, 1)
_FAILING = (Status.FAILED, Status.ERROR)


def grade_log(
    instance: Instance,
    output: str,
    *,
    exit_code: int | None,
    canaries: Canaries | None = None,
    problem: str | None = None,
    guard: str | None = None,
    **fields: object,
) -> GradeReport:
    """Grade the test command's output with the official rule: resolved iff every listed test passed.

    `exit_code` is the test command's own exit status, observed outside the graded process tree. On
    top of the official rule a log is void (everything counts as not passed) when the command did not
    run to a normal end, the runner never printed its closing line, a canary misbehaved, or the exit
    status contradicts a failure the log reports, or the test-process guard's verdict `guard` says the
    run was tampered with. None of these can void an honest run. Every check still runs when another
    voided the log, so the problem names each defense that caught it.
    """
    name = parser_name(instance.repo, instance.log_parser)
    statuses: dict[str, object] = dict(PARSERS[name](output)) if problem is None else {}
    if problem is None:
        problem = _distrust(name, output, statuses, exit_code, canaries)
        if guard is not None:
            problem = f"{problem}; {guard}" if problem is not None else guard
    void = problem is not None
    if canaries is not None:
        statuses = {t: s for t, s in statuses.items() if not canaries.owns(t)}
    f2p = _outcome(instance.FAIL_TO_PASS, statuses, void)
    p2p = _outcome(instance.PASS_TO_PASS, statuses, void)
    resolved = not void and not (f2p.failed or f2p.missing or p2p.failed or p2p.missing)
    if problem is not None and problem.startswith("canary"):
        fields["canary"] = "void"
    elif canaries is not None and (not void or (guard is not None and problem == guard)):
        fields["canary"] = "passed"  # voided by the guard alone: the canaries themselves behaved
    return GradeReport(
        instance_id=instance.instance_id,
        resolved=resolved,
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        problem=problem,
        test_exit_code=exit_code,
        parser=name,
        **fields,
    )


def _distrust(
    name: str, output: str, statuses: dict[str, object], exit_code: int | None, canaries: Canaries | None
) -> str | None:
    if exit_code is None:
        return "the test command did not run"
    if exit_code not in _GOOD_EXITS:
        return f"the test command exited {exit_code}: the run broke, its results are not trusted"
    if canaries is not None and (verdict := canaries.verdict(statuses)) is not None:
        return verdict
    if not finished(name, output):
        return "the test runner never finished (no closing summary line): the tests did not run"
    if exit_code == 0 and any(s in _FAILING for s in statuses.values()):
        return "the test command exited 0 but the log reports failures: the log is forged"
    return None


def refused(instance: Instance, reason: str, **fields: object) -> GradeReport:
    """A submission that could not be graded because of what the agent did: every test not passed."""
    name = parser_name(instance.repo, instance.log_parser)
    return GradeReport(
        instance_id=instance.instance_id,
        resolved=False,
        fail_to_pass=_outcome(instance.FAIL_TO_PASS, {}, True),
        pass_to_pass=_outcome(instance.PASS_TO_PASS, {}, True),
        problem=reason,
        parser=name,
        **fields,
    )
