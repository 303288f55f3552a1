"""Grade Python code against hidden tests in a fresh sandbox, so that the code cannot forge its grade.

The design, and what each part stops (`docs/rewards.md` has the full list):

- A fresh sandbox per grade: nothing the agent did in its own session (files, processes, patched
  modules) is there, and the sandbox is closed afterwards, with everything the solution started.
- The hidden tests never touch the sandbox's disk: they reach the grader process on its stdin.
- No pytest, no unittest: a small grader of our own, so conftest.py, plugins and framework patches have
  nothing to patch.
- Two processes: the solution runs in a child that gets each test's *probe* (`add(2, 3)`) but never its
  *check* (`result == 5`); the trusted parent judges the value the child returns. Values travel as
  exact builtin types, so an object whose `__eq__` is always true cannot even be sent.
- The parent is non-dumpable and signs its report with an HMAC keyed by a per-grade nonce the solution
  never sees; printed "passed" lines, results files and exit codes of the solution count for nothing.
  A recorded episode never stores the nonce: it is derived from the user's recording key and bound to
  the episode and to what is judged (`recording.secret_bytes`), so a replay derives it again and a
  report spliced from another episode does not verify.
- Every test must be answered: a solution that exits, hangs, or kills the grader fails the tests it did
  not answer; a report that is unsigned, incomplete or from a failed run scores 0 across the board.
- Canary tests, fresh for every grade, hide among the real ones: one that must fail and one that must
  pass for each kind of test. A runner tampered with into passing everything passes the must-fail one
  too, and the grade is void; results of statement tests, which run beside the solution, never count
  as passes (`trusted=False`).
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envhub.core import InfrastructureError
from envhub.record import tape as recording
from envhub.sandbox import Backend, ExecResult, IsolationPolicy, IsolationReport
from envhub.sandbox import open as open_sandbox

_HERE = Path(__file__).parent
GRADER_SOURCE = (_HERE / "_grader.py").read_text()
PROBE_SOURCE = (_HERE / "_probe.py").read_text()
VERIFIER_HASH = hashlib.sha256((GRADER_SOURCE + PROBE_SOURCE).encode()).hexdigest()[:16]
"""Recorded with grades: which grader judged them."""

GRADE_POLICY = IsolationPolicy(memory_mb=512, pids=64, cpus=1.0, wall_time_s=60.0, disk_mb=64)
"""No network, small limits: enough for a test suite of small functions."""

SIGNED = "ENVHUB-GRADE "


class HiddenTest(BaseModel):
    """One test: `probe` runs beside the solution; `check` judges its value where the solution can't reach.

    `check` is a Python expression over `result` (the probe's value, rebuilt from plain builtins) and
    the names of the prelude and check prelude; `same(a, b)` is a type-strict equality. A test with
    `check=None` is a *statement* test (loops over the solution, say): it runs entirely beside the
    solution, with `==` made type-strict, and passes if it raises nothing. Its verdict is less
    trustworthy (`trusted=False` in the results); use it only for tests that cannot be split into a
    probe and a check.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    probe: str
    check: str | None
    source: str = ""
    """The test as a person would read it (`assert add(2, 3) == 5`), for prompts and logs."""
    timeout_s: float = Field(5.0, gt=0)

    @classmethod
    def returns(cls, name: str, call: str, expected: object, *, timeout_s: float = 5.0) -> HiddenTest:
        """`call` must return exactly `expected` (a builtin value), types included."""
        try:
            readable = ast.literal_eval(repr(expected)) == expected
        except (ValueError, SyntaxError):
            readable = False
        if not readable:
            raise ValueError(
                f"expected values must be builtin literals whose repr reads back (got {expected!r}); "
                "write the check by hand, e.g. check='math.isinf(result)'"
            )
        return cls(
            name=name,
            probe=call,
            check=f"same(result, {expected!r})",
            source=f"assert {call} == {expected!r}",
            timeout_s=timeout_s,
        )


class TestResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    passed: bool
    """What the test reported. For an untrusted test this is a claim, and counts as not passed."""
    error: str | None = None
    trusted: bool = True
    """False for statement tests, whose verdict came from beside the solution."""

    @property
    def counts(self) -> bool:
        """Whether this result counts as a pass toward a grade: passed, and judged by the grader."""
        return self.passed and self.trusted


class GradeEvidence(BaseModel):
    """What the grade rests on, so a suspicious reward can be audited."""

    model_config = ConfigDict(frozen=True)

    exit_code: int
    timed_out: bool
    tests_expected: int
    tests_reported: int
    signature_ok: bool
    """Every grader line carried a valid HMAC for this grade's nonce, and none was forged."""
    grader_private: bool
    """The grader made itself non-dumpable (its memory and fds closed to the solution's uid)."""
    solution_processes: int
    """Child processes started for the solution (1 + one per test that crashed or hung it)."""
    canaries: int = 0
    """Canary tests run beside the real ones (not in `tests_expected` or the results)."""
    problem: str | None = None
    """Why the grade is void (scored 0), if it is."""
    duration_s: float
    verifier: str = VERIFIER_HASH


class GradeReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    results: list[TestResult]
    passed_fraction: float
    """Tests passed and judged by the grader, over all tests; an untrusted pass counts as a failure."""
    all_passed: bool
    """Every test passed and was judged by the grader (so never, when there are statement tests)."""
    valid: bool
    """The grader ran every test and signed a complete report, and every canary behaved; otherwise
    every test counts as failed."""
    evidence: GradeEvidence
    isolation: IsolationReport | None = None
    untrusted_passed: int = 0
    """Statement tests that reported a pass: shown, never counted (0 when the grade is void)."""

    def fraction(self, names: set[str]) -> float:
        """The passed fraction over a subset of the tests (e.g. the public ones); untrusted passes fail."""
        chosen = [r for r in self.results if r.name in names]
        return sum(r.counts for r in chosen) / len(chosen) if chosen and self.valid else 0.0


async def grade_python(
    solution: str | dict[str, str],
    tests: list[HiddenTest],
    *,
    prelude: str = "",
    check_prelude: str = "",
    module: str = "solution",
    policy: IsolationPolicy | None = None,
    backend: Backend = "local",
    import_timeout_s: float = 10.0,
    time_limit_s: float = 30.0,
) -> GradeReport:
    """Run `tests` against `solution` (source of `solution.py`, or files by path) in a fresh sandbox.

    Each test has its own timeout; `time_limit_s` caps the whole suite (tests left when it runs out
    fail), so a solution that hangs every test costs seconds, not minutes. `prelude` is test code
    both sides run first (imports, helper functions): it is visible to the solution, so it must hold no
    expected values. `check_prelude` runs after it on the grader's side only, never beside the
    solution: the place for values the checks compare against (a solution can read its caller's
    frame). Raises InfrastructureError if the sandbox or the grader itself could not run (the runner
    retries those); everything the solution does scores.
    """
    policy = policy or GRADE_POLICY
    names = _check_arguments(tests, policy, time_limit_s)
    files = {f"{module}.py": solution} if isinstance(solution, str) else dict(solution)
    nonce = recording.secret_bytes(32, _judged(files, tests, prelude, check_prelude, module))
    graded = _mix_in_canaries(tests)
    payload = _payload(
        nonce,
        graded,
        policy=policy,
        module=module,
        prelude=prelude,
        check_prelude=check_prelude,
        import_timeout_s=import_timeout_s,
        time_limit_s=time_limit_s,
    )
    started = time.perf_counter()
    run, isolation = await _run_grader(backend, policy, files, payload)
    duration = time.perf_counter() - started
    records, forged = _signed_records(run.stdout, nonce)
    start = next((r for r in records if r.get("event") == "started"), None)
    if start is None:
        raise InfrastructureError(
            f"the grader did not start in the {backend} sandbox (exit {run.exit_code}): "
            f"{run.stderr.strip()[-2000:] or 'no output'}"
        )
    error = next((r for r in records if r.get("event") == "error"), None)
    if error is not None:
        raise ValueError(f"the hidden tests are broken: {error.get('message')}")
    done = next((r for r in records if r.get("event") == "done"), None)
    reported = done.get("results") if done else None
    problem = _problem(run, forged, start, reported, graded, policy)
    entries = reported if problem is None and isinstance(reported, list) else [None] * len(graded)
    results = _results(graded, entries, problem, names)
    valid = problem is None
    passed = sum(r.counts for r in results) if valid else 0
    evidence = GradeEvidence(
        exit_code=run.exit_code,
        timed_out=run.timed_out,
        tests_expected=len(tests),
        tests_reported=sum(1 for g, e in zip(graded, entries, strict=True) if g.role == "test" and e),
        signature_ok=not forged,
        grader_private=bool(start.get("private")),
        solution_processes=int(str(done.get("children", 0))) if done else 0,
        canaries=len(graded) - len(tests),
        problem=problem,
        duration_s=duration,
    )
    return GradeReport(
        results=results,
        passed_fraction=passed / len(tests),
        all_passed=valid and passed == len(tests),
        valid=valid,
        evidence=evidence,
        isolation=isolation,
        untrusted_passed=sum(r.passed and not r.trusted for r in results) if valid else 0,
    )


def _check_arguments(tests: list[HiddenTest], policy: IsolationPolicy, time_limit_s: float) -> list[str]:
    """The tests' names, once they are known to be some, unique, and to fit in the sandbox's time."""
    if not tests:
        raise ValueError("grade_python needs at least one test")
    names = [t.name for t in tests]
    if len(set(names)) != len(names):
        raise ValueError(f"test names must be unique, got {names}")
    if time_limit_s + 5 > policy.wall_time_s:
        raise ValueError(
            f"time_limit_s={time_limit_s:g} leaves no room inside the sandbox's wall time "
            f"({policy.wall_time_s:g} s); lower it or raise the policy's wall_time_s"
        )
    return names


async def _run_grader(
    backend: Backend, policy: IsolationPolicy, files: dict[str, str], payload: dict[str, Any]
) -> tuple[ExecResult, IsolationReport]:
    """The solution's files written to a fresh sandbox, then the grader run there on the payload."""
    async with open_sandbox(backend, policy=policy) as sb:
        for path, text in files.items():
            await sb.write_file(path, text)
        # Only now, and only through the grader's stdin, do the tests enter the sandbox.
        run = await sb.exec(
            ["python3", "-I", "-S", "-c", GRADER_SOURCE], stdin=json.dumps(payload), cwd="/tmp"
        )
        return run, sb.report()


def _payload(
    nonce: bytes,
    graded: list[_Graded],
    *,
    policy: IsolationPolicy,
    module: str,
    prelude: str,
    check_prelude: str,
    import_timeout_s: float,
    time_limit_s: float,
) -> dict[str, Any]:
    """What the grader reads from its stdin: the key, the preludes and every test (canaries mixed in)."""
    return {
        "nonce": nonce.hex(),
        "workdir": policy.workdir,
        "module": module,
        "prelude": prelude,
        "check_prelude": check_prelude,
        "probe_source": PROBE_SOURCE,
        "import_timeout": import_timeout_s,
        "time_limit": time_limit_s,
        "tests": [
            {
                "probe": g.test.probe,
                "check": g.test.check,
                "mode": "statement" if g.test.check is None else "probe",
                "timeout": g.test.timeout_s,
            }
            for g in graded
        ],
    }


def _problem(
    run: ExecResult,
    forged: bool,
    start: dict[str, Any],
    reported: object,
    graded: list[_Graded],
    policy: IsolationPolicy,
) -> str | None:
    """Why the grade is void (forged lines, a grader within reach, a run cut short, a canary that
    misbehaved), or None when the report can be trusted."""
    if forged:
        return "lines imitating the grader's report were printed"
    if start.get("private") is not True:
        return "the grader could not make itself non-dumpable, so its key was within the solution's reach"
    if run.timed_out:
        return f"grading ran past the sandbox's wall time ({policy.wall_time_s:g} s)"
    if not isinstance(reported, list):
        return f"the grader was stopped before it reported (exit {run.exit_code})"
    if run.exit_code != 0:
        return f"the grader exited with status {run.exit_code}"
    if len(reported) != len(graded) or not all(isinstance(r, dict) for r in reported):
        return f"the grader reported {len(reported)} results for {len(graded)} tests"
    return _canary_problem(graded, reported)


def _results(
    graded: list[_Graded], entries: list[Any], problem: str | None, names: list[str]
) -> list[TestResult]:
    """Each real test's result, in the caller's order; every one failed, naming why, when the grade is
    void."""
    results: list[TestResult] = []
    for g, entry in zip(graded, entries, strict=True):
        if g.role != "test":
            continue
        if entry is None:
            results.append(TestResult(name=g.test.name, passed=False, error=problem or "not run"))
        else:
            results.append(
                TestResult(
                    name=g.test.name,
                    passed=entry.get("passed") is True,
                    error=entry.get("error"),
                    trusted=g.test.check is not None,
                )
            )
    order = {name: i for i, name in enumerate(names)}
    results.sort(key=lambda r: order[r.name])  # the caller's order, not the shuffled one
    return results


def _judged(
    files: dict[str, str], tests: list[HiddenTest], prelude: str, check_prelude: str, module: str
) -> str:
    """A digest of what this grade judges, which its nonce is bound to in a recorded episode: a signed
    report replayed for another submission or other tests does not verify (`recording.secret_bytes`)."""
    judged = [VERIFIER_HASH, files, [t.model_dump() for t in tests], prelude, check_prelude, module]
    return hashlib.sha256(json.dumps(judged, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class _Graded:
    """A test as sent to the grader: a real one, or a canary that must pass or must fail."""

    test: HiddenTest
    role: Literal["test", "must-pass", "must-fail"]


def _mix_in_canaries(tests: list[HiddenTest]) -> list[_Graded]:
    """The tests with canaries shuffled in, fresh for this grade, so the solution cannot predict them.

    For each kind of test present (probe/check; statement) one canary must fail and one must pass, sent
    by the same mechanism as the real tests. A must-fail canary repeats a real test's probe or
    statement, so the solution's process sees nothing new; only the grader's side makes it fail (a
    check that is never true; a false assertion after the statement). A must-pass canary is a
    computation on literals, whose right answer depends on nothing the solution wrote. Their names come
    from `secrets`, drawn through the recorder (which keeps them for a replay), and never leave the host.
    """
    rng = recording.SystemRandom()
    probes = [t for t in tests if t.check is not None]
    statements = [t for t in tests if t.check is None]
    graded = [_Graded(t, "test") for t in tests] + _probe_canaries(probes, rng)
    if statements:  # with no statement runner to tamper with, a lone statement canary would stand out
        graded += _statement_canaries(statements, rng)
    rng.shuffle(graded)
    return graded


def _probe_canaries(real: list[HiddenTest], rng: recording.SystemRandom) -> list[_Graded]:
    a, b = rng.randrange(2, 10**9), rng.randrange(2, 10**9)
    base = rng.choice(real) if real else HiddenTest(name="", probe=f"{a} - {b}", check=None)
    fail = HiddenTest(name=recording.token_hex(8), probe=base.probe, check="False", timeout_s=base.timeout_s)
    ok = HiddenTest(name=recording.token_hex(8), probe=f"{a} * {b}", check=f"same(result, {a * b})")
    return [_Graded(fail, "must-fail"), _Graded(ok, "must-pass")]


def _statement_canaries(real: list[HiddenTest], rng: recording.SystemRandom) -> list[_Graded]:
    a, b = rng.randrange(2, 10**9), rng.randrange(2, 10**9)
    base = rng.choice(real)
    false = f"assert {a} * {b} == {a * b + rng.randrange(1, 10**6)}"
    fail = HiddenTest(
        name=recording.token_hex(8), probe=f"{base.probe}\n{false}", check=None, timeout_s=base.timeout_s
    )
    ok = HiddenTest(name=recording.token_hex(8), probe=f"assert {a} * {b} == {a * b}", check=None)
    return [_Graded(fail, "must-fail"), _Graded(ok, "must-pass")]


def _canary_problem(graded: list[_Graded], reported: list[dict[str, object]]) -> str | None:
    """Why the canaries void the grade: a must-fail one passed, or a must-pass one was answered wrong.

    A must-pass canary the solution never answered (it crashed, hung, or ran out the suite's time)
    voids nothing: the solution's own tests fail for the same reason.
    """
    for g, entry in zip(graded, reported, strict=True):
        if g.role == "must-fail" and entry.get("passed") is not False:
            return "a canary test that must fail was reported as passed: the test runner was tampered with"
        if g.role == "must-pass" and entry.get("passed") is not True and entry.get("answered") is True:
            return (
                "a canary test that must pass got a wrong answer: the solution's process does not "
                f"evaluate tests honestly ({str(entry.get('error'))[:200]})"
            )
    return None


def _signed_records(stdout: str, key: bytes) -> tuple[list[dict[str, object]], bool]:
    """The grader's records whose HMAC checks out; and whether any line claimed to be one and failed."""
    records: list[dict[str, object]] = []
    forged = False
    for line in stdout.splitlines():
        if not line.startswith(SIGNED):
            continue  # the grader prints nothing else; anything else is noise, never evidence
        mac, _, body = line[len(SIGNED) :].partition(" ")
        expected = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, expected):
            forged = True
            continue
        try:
            record = json.loads(body)
        except ValueError:
            forged = True
            continue
        if isinstance(record, dict):
            records.append(record)
    return records, forged
