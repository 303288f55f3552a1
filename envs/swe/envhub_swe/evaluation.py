"""The official grading semantics, as pure functions over text: adapt the row's eval script, cut and
parse its log, and decide `resolved`. `runtime.py` runs the script; nothing here touches a sandbox.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from envhub_swe.data import Instance
from envhub_swe.parsers import PARSERS, PASSING, finished, parser_name

START = ">>>>> Start Test Output"
END = ">>>>> End Test Output"
EXIT = ">>>>> envhub test exit code"
_ACTIVATION = re.compile(r"^(source /opt/miniconda3/bin/activate|conda activate \S+)\s*$")
_REINSTALL = re.compile(r"^(python -m )?pip install\b.*|^python setup\.py (develop|install)\b.*")
_HEREDOC = re.compile(r"<<\s*'?(\w+)'?\s*$")
_TEST_INFRA = re.compile(
    r"(^|/)(tests?|testing|e2e)(/|$)|(^|/)test_[^/]*$|_tests?\.py$|(^|/)conftest\.py$"
    r"|(^|/)(sitecustomize|usercustomize)\.py$|\.pth$|(^|/)(pytest\.ini|tox\.ini|setup\.cfg|pyproject\.toml|runtests\.py)$"
)
"""Paths a submission may not change: tests, test configuration and interpreter start-up hooks.

The same rule the dataset's makers used to split pull requests into `patch` and `test_patch` (no
gold patch of Lite touches such a path), so dropping them never costs an honest fix.
"""


def adapt_eval_script(
    script: str,
    *,
    nonce: str,
    activation: str | None = None,
    testbed: str = "/testbed",
    skip_install: bool = False,
) -> str:
    """The row's own eval script with only the runtime adapted.

    `activation` replaces the conda activation lines (None keeps them, for the official images);
    `testbed` replaces the `/testbed` path; `skip_install` drops the per-evaluation reinstall, which
    needs a package index; and the test command's exit status is printed before the end marker,
    tagged with `nonce` so a line printed by the code under test cannot pass for it.
    """
    out: list[str] = []
    heredoc: str | None = None
    for line in script.splitlines():
        if heredoc is not None:  # the test patch itself: never rewritten
            out.append(line)
            if line == heredoc:
                heredoc = None
            continue
        if found := _HEREDOC.search(line):
            heredoc = found[1]
        if activation is not None and _ACTIVATION.match(line):
            if activation and activation not in out:
                out.append(activation)
            continue
        if skip_install and _REINSTALL.match(line):
            out.append(": 'envhub: reinstall skipped, the environment is already installed'")
            continue
        if END in line:
            out.append(f'echo "{EXIT} {nonce}: $?"')
        if testbed != "/testbed":
            line = re.sub(r"/testbed\b", testbed, line)
        out.append(line)
    if not any(END in line for line in out):
        raise ValueError(
            "the eval script has no '>>>>> End Test Output' marker; it is not an official script"
        )
    return "\n".join(out) + "\n"


def cut_test_output(log: str) -> str | None:
    """The merged log between the start and end markers (with `set -x` they arrive as `+ : '>>>>> ...'`)."""
    lines = log.splitlines()
    starts = [i for i, line in enumerate(lines) if START in line]
    ends = [i for i, line in enumerate(lines) if END in line]
    if not starts or not ends or ends[-1] < starts[0]:
        return None
    return "\n".join(lines[starts[0] + 1 : ends[-1]])


def test_exit_code(section: str, nonce: str) -> int | None:
    """The test command's exit status, from the line our script printed; the last such line counts."""
    codes = re.findall(rf"^{re.escape(EXIT)} {re.escape(nonce)}: (\d+)$", section, re.MULTILINE)
    return int(codes[-1]) if codes else None


def split_patch(patch: str) -> dict[str, str]:
    """A unified diff by file (its `b/` path), each chunk starting at its `diff --git` line."""
    chunks: dict[str, str] = {}
    key: str | None = None
    for line in patch.splitlines(keepends=True):
        if line.startswith("diff --git "):
            match = re.match(r"diff --git a/(\S+) b/(\S+)", line)
            key = match[2] if match else line.strip()
            chunks[key] = ""
        if key is not None:
            chunks[key] += line
    return chunks


def filter_patch(patch: str) -> tuple[str, list[str]]:
    """The submission without its changes to tests and test configuration, and the files dropped."""
    kept, dropped = [], []
    for path, chunk in split_patch(patch).items():
        old = re.match(r"diff --git a/(\S+) ", chunk)
        if _TEST_INFRA.search(path) or (old is not None and _TEST_INFRA.search(old[1])):
            dropped.append(path)
        else:
            kept.append(chunk)
    return "".join(kept), dropped


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
    dropped_files: list[str] = []
    """Files of the submission left out of grading: tests and test configuration."""
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


def grade_log(
    instance: Instance, log: str, *, nonce: str, problem: str | None = None, **fields: object
) -> GradeReport:
    """Grade a merged eval log with the official rule: resolved iff every listed test passed.

    On top of it, a log is void (everything counts as not passed) when the test output is missing,
    the runner never printed its closing line, or the test command's exit status says it broke or
    contradicts the results.
    """
    name = parser_name(instance.repo, instance.log_parser)
    section = cut_test_output(log)
    statuses: dict[str, object] = {}
    exit_code = None
    if problem is None and section is None:
        problem = "no test output between the >>>>> Start/End Test Output markers"
    if section is not None:
        statuses = dict(PARSERS[name](section))
        exit_code = test_exit_code(section, nonce)
        if problem is None:
            if exit_code is None:
                problem = "the test command's exit status is missing (the script was cut short)"
            elif not finished(name, section):
                problem = "the test runner never finished (no closing summary line): the tests did not run"
            elif exit_code not in _GOOD_EXITS:
                problem = f"the test command exited {exit_code}: the run broke, its results are not trusted"
            elif exit_code == 0 and any(s not in PASSING and s != "SKIPPED" for s in statuses.values()):
                problem = "the test command exited 0 but the log reports failures: the log is forged"
    void = problem is not None
    f2p = _outcome(instance.FAIL_TO_PASS, statuses, void)
    p2p = _outcome(instance.PASS_TO_PASS, statuses, void)
    resolved = not void and not (f2p.failed or f2p.missing or p2p.failed or p2p.missing)
    return GradeReport(
        instance_id=instance.instance_id,
        resolved=resolved,
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        problem=problem,
        test_exit_code=exit_code,
        parser=name,
        log=log[-20_000:],
        **fields,
    )
