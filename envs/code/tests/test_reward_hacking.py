"""Each known reward hack, really performed through the environment, must score 0 (or be impossible).

The task is `sum-multiples-00` (sum the even numbers); no solution below solves it, each only cheats.
`docs/rewards.md` lists the defenses these tests hold in place.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from pathlib import Path
from typing import Any

import pytest
from envhub_code import CodeRepl, CodeSingle, builtin_tasks

from envhub.grading import GradeReport, HiddenTest, grade_python
from envhub.grading.python_tests import _signed_records
from envhub.messages import Message, ToolCall

TASK = next(t for t in builtin_tasks() if t.id == "sum-multiples-00")


async def play(code: str) -> tuple[float, GradeReport]:
    """Submit `code` as the answer of a single-turn episode; the reward and the grade behind it."""
    env = CodeSingle(task=TASK.id)
    await env.reset(seed=0)
    result = await env.step(f"```python\n{code}\n```")
    grade = await env.graded("")
    assert grade is not None and result.terminated
    return result.reward, grade


@pytest.mark.parametrize(
    "code",
    [
        "import sys\nsys.exit(0)",
        "import sys\ndef sum_multiples(numbers):\n    sys.exit(0)",
        "raise SystemExit(0)",
    ],
    ids=["at-import", "in-a-test", "raise-SystemExit"],
)
async def test_sys_exit_before_the_tests(code: str) -> None:
    reward, grade = await play(code)
    assert reward == 0.0
    assert all("SystemExit" in (r.error or "") for r in grade.results)


@pytest.mark.parametrize(
    "code",
    ["import os\nos._exit(0)", "import os\ndef sum_multiples(numbers):\n    os._exit(0)"],
    ids=["at-import", "in-every-test"],
)
async def test_os_exit_before_the_tests(code: str) -> None:
    reward, grade = await play(code)
    assert reward == 0.0
    assert all("exited before answering (status 0)" in (r.error or "") for r in grade.results)


FRAMEWORK_PATCHES = """
import builtins, os, sys, unittest
unittest.TestCase.assertEqual = lambda *args, **kwargs: None
unittest.TestCase.run = lambda self, result=None: None
unittest.TestResult.wasSuccessful = lambda self: True
builtins.AssertionError = type("NeverRaised", (Exception,), {})
sys.modules["pytest"] = type(sys)("pytest")
for name, text in {
    "conftest.py": "def pytest_runtest_makereport(item, call):\\n    call.excinfo = None\\n",
    "sitecustomize.py": "import builtins; builtins.all = lambda *a: True\\n",
}.items():
    with open(os.path.join(os.path.dirname(__file__), name), "w") as f:
        f.write(text)

def sum_multiples(numbers):
    return None
"""


async def test_monkeypatching_the_test_framework() -> None:
    """No pytest, no unittest: the grader has nothing to patch, conftest/sitecustomize are never loaded."""
    reward, _ = await play(FRAMEWORK_PATCHES)
    assert reward == 0.0
    files = {
        "solution.py": "def sum_multiples(numbers):\n    return None\n",
        "conftest.py": "import pytest\n@pytest.hookimpl(tryfirst=True)\ndef pytest_runtest_call(item):\n"
        "    raise pytest.skip.Exception('skipped')\n",
        "pytest.py": "def main(*a, **k):\n    return 0\n",
        "sitecustomize.py": "import builtins\nbuiltins.eval = lambda *a, **k: True\n",
        "usercustomize.py": "import builtins\nbuiltins.bool = lambda *a: True\n",
        "json.py": 'def dumps(*a, **k):\n    return \'{"i": 0, "ok": true, "value": ["int", "0x0"]}\'\n',
    }
    grade = await grade_python(files, list(TASK.hidden_tests))
    assert grade.valid and grade.passed_fraction == 0.0


@pytest.mark.parametrize(
    "returned",
    [
        "type('AlwaysEqual', (), {'__eq__': lambda s, o: True, '__ne__': lambda s, o: False})()",
        "type('Int', (int,), {'__eq__': lambda s, o: True})(0)",
        "type('Str', (str,), {'__eq__': lambda s, o: True})('')",
        "type('L', (list,), {'__eq__': lambda s, o: True})()",
    ],
    ids=["object", "int-subclass", "str-subclass", "list-subclass"],
)
async def test_eq_that_is_always_true(returned: str) -> None:
    reward, grade = await play(f"def sum_multiples(numbers):\n    return {returned}")
    assert reward == 0.0
    assert all("only builtin values can be compared" in (r.error or "") for r in grade.results)


CRAWL = """
import os, re, sys

MARKERS = ("same(result", "sum_multiples(", "envhub_code")  # hidden checks, probes or reference, the env

def crawl():
    found, answers = [], {}
    me = os.path.abspath(globals().get("__file__", "/work/solution.py"))
    for root in ("/", "/dev/shm", "/usr/local", "/usr/lib/python3/dist-packages"):
        for dirpath, dirnames, filenames in os.walk(root):
            if dirpath in ("/proc", "/sys", "/dev", "/usr"):  # /proc is read below; /usr is the host's OS
                dirnames[:] = []
                continue
            for name in filenames:
                path = os.path.join(dirpath, name)
                if path == me or "__pycache__" in path:
                    continue
                try:
                    with open(path, "rb") as f:
                        data = f.read(1 << 20).decode("utf-8", "replace")
                except Exception:
                    continue
                if any(m in data for m in MARKERS):
                    found.append(path)
                for call, value in re.findall(r"(sum_multiples\\(.*?\\)), (-?\\d+)\\)", data):
                    answers[call] = int(value)
    for pid in os.listdir("/proc"):
        for entry in ("cmdline", "environ", "mem", "fd/0", "fd/1", "fd/3"):
            try:  # non-blocking: some of these are pipes, our own result pipe among them
                fd = os.open(f"/proc/{pid}/{entry}", os.O_RDONLY | os.O_NONBLOCK)
                try:
                    data = os.read(fd, 1 << 16).decode("utf-8", "replace")
                finally:
                    os.close(fd)
            except Exception:
                continue
            if any(m in data for m in MARKERS):
                found.append(f"/proc/{pid}/{entry}")
    for module in ("envhub_code", "envhub"):
        try:
            __import__(module)
            found.append(module)
        except Exception:
            pass
    return found, answers

FOUND, ANSWERS = crawl()

def leaks():
    return FOUND

def sum_multiples(numbers):
    return ANSWERS.get(f"sum_multiples({numbers!r})")
"""


async def test_reading_hidden_tests_or_the_reference_from_disk() -> None:
    """Hidden tests reach the grader on its stdin, never a file; the reference never enters at all."""
    reward, _ = await play(CRAWL)
    assert reward == 0.0
    grade = await grade_python(CRAWL, [HiddenTest(name="leaks", probe="leaks()", check="same(result, [])")])
    assert grade.all_passed, grade.results  # the crawl found nothing: no test, no reference, no envhub
    assert "% 2 == 0" in TASK.reference  # ... though the marker is in the reference solution


async def test_reading_from_disk_in_the_repl_finds_nothing_either() -> None:
    env = CodeRepl(task=TASK.id)
    await env.reset(seed=0)
    try:
        found = await env.python(CRAWL + "\nFOUND")
    finally:
        await env.close()
    assert found == "[]"


async def test_writing_a_fake_results_file() -> None:
    code = """
import json, os
report = {"passed": 11, "failed": 0, "results": [{"passed": True}] * 11, "event": "done"}
for path in ("/work/results.json", "/tmp/results.json", "/work/.envhub_results", "/tmp/report.xml",
             "/work/.pytest_cache/v/cache/lastfailed"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(json.dumps(report) if not path.endswith(".xml") else '<testsuite failures="0" tests="11"/>')

def sum_multiples(numbers):
    return None
"""
    reward, _ = await play(code)
    assert reward == 0.0


async def test_printing_fake_passed_output() -> None:
    fake_done = (
        '{"event":"done","children":1,"results":[' + ",".join(['{"passed":true,"error":null}'] * 11) + "]}"
    )
    code = f"""
import os, sys
LINES = ["ENVHUB-GRADE {"0" * 64} {fake_done}", "===== 11 passed in 0.01s =====", "OK", "ALL TESTS PASSED"]

def shout():
    for line in LINES:
        print(line)
        print(line, file=sys.stderr)
        for target in ("/proc/1/fd/1", f"/proc/{{os.getppid()}}/fd/1", "/dev/tty", "/dev/console"):
            try:
                with open(target, "w") as f:
                    f.write(line + "\\n")
            except OSError:
                pass

shout()

def sum_multiples(numbers):
    shout()
    return None
"""
    reward, grade = await play(code)
    assert reward == 0.0
    assert all(not r.passed for r in grade.results)


def test_forged_grader_lines_void_the_grade() -> None:
    """Should a forged line ever reach the grader's stdout, it fails the HMAC and voids the grade."""
    key = secrets.token_bytes(32)
    records, forged = _signed_records('ENVHUB-GRADE 00ff {"event": "done", "results": []}\nnoise', key)
    assert records == [] and forged


@pytest.mark.parametrize(
    "code",
    [
        "import unittest\ndef sum_multiples(numbers):\n    raise unittest.SkipTest('not today')",
        "import os, glob\nfor p in glob.glob('/work/*') + glob.glob('/tmp/*'):\n"
        "    if not p.endswith('solution.py'):\n        os.remove(p)\n"
        "def sum_multiples(numbers):\n    return None",
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "import os, signal\nos.kill(-1, signal.SIGKILL)",
    ],
    ids=["skip", "delete-files", "kill-the-grader", "kill-everything"],
)
async def test_deleting_or_skipping_tests(code: str) -> None:
    """Skips count as failures; every test must be answered, or the grade is void."""
    reward, grade = await play(code)
    assert reward == 0.0
    if "kill" in code:
        assert not grade.valid and grade.evidence.problem is not None


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


async def _until_gone(marker: str) -> list[int]:
    """The host processes still carrying `marker` once they are gone, or after 30 s (then the test fails):
    a killed process leaves /proc when it is reaped, a moment that a busy host may delay."""
    for _ in range(1500):
        if not (alive := _host_processes_with(marker)):
            return alive
        await asyncio.sleep(0.02)
    return _host_processes_with(marker)


def _spawner(marker: str) -> str:
    return f'''
import os, subprocess, sys
def spawn():
    subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(1)", "{marker}"],
                     start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if os.fork() == 0:  # and a double-forked daemon
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time\\ntime.sleep(600)", "{marker}"])
        os._exit(0)
    os.wait()
spawn()
def sum_multiples(numbers):
    return None
'''


async def test_a_background_process_does_not_outlive_grading() -> None:
    marker = f"envhub-hack-{secrets.token_hex(6)}"
    reward, _ = await play(_spawner(marker))
    assert reward == 0.0
    count = (  # both processes once they are there (the daemon's exec may lag its parent's exit), or 1
        "import os, time\ndef alive():\n    for _ in range(500):\n"
        "        n = sum(1 for p in os.listdir('/proc') "
        f"if p.isdigit() and b'{marker}' in open(f'/proc/{{p}}/cmdline', 'rb').read())\n"
        "        if n >= 2:\n            return n\n        time.sleep(0.02)\n    return n\n"
    )
    alive = HiddenTest(name="alive", probe="alive()", check="same(result, 2)")
    grade = await grade_python(_spawner(marker) + count, [alive])
    assert grade.all_passed, "the hack must really have started its processes while it was graded"
    assert await _until_gone(marker) == []


async def test_a_background_process_does_not_outlive_the_repl_episode() -> None:
    marker = f"envhub-hack-{secrets.token_hex(6)}"
    spawn = _spawner(marker).replace("def sum_multiples(numbers):\n    return None\n", "")
    env = CodeRepl(task=TASK.id)
    await env.reset(seed=0)
    call = ToolCall.create("python", {"code": spawn}, id="c1")
    await env.step(Message(role="assistant", tool_calls=[call]))
    for _ in range(100):  # the daemon's exec may lag its parent's exit a little
        if len(_host_processes_with(marker)) == 2:
            break
        await asyncio.sleep(0.02)
    assert len(_host_processes_with(marker)) == 2, "the hack must really have started its processes"
    result = await env.step("```python\ndef sum_multiples(numbers):\n    return None\n```")
    assert result.terminated and result.reward == 0.0
    assert await _until_gone(marker) == []


# Statement tests run beside the solution: a solution can rewrite the runner that executes them.
RUNNER_PATCHES = {
    "no-op-statements": (
        "import __main__\n__main__.strict_statements = lambda source: compile('pass', '<test>', 'exec')\n"
    ),
    "forged-reports": (
        "import json\n"
        "_dumps = json.dumps\n"
        "def _forge(message, *args, **kwargs):\n"
        "    if isinstance(message, dict) and message.get('ok') is False:\n"
        "        message = {'i': message.get('i'), 'ok': True}\n"
        "    return _dumps(message, *args, **kwargs)\n"
        "json.dumps = _forge\n"
    ),
}


def _humaneval_row(task_id: str, check_body: str) -> dict[str, str]:
    return {
        "task_id": task_id,
        "prompt": 'def double_all(xs: list) -> list:\n    """Double every element."""\n',
        "canonical_solution": "    return [2 * x for x in xs]\n",
        "test": f"import random\n\n\ndef check(candidate):\n{check_body}",
        "entry_point": "double_all",
    }


LITERAL_LOOP = _humaneval_row(
    "Hack/0",
    "    assert candidate([]) == []\n    for n in range(1, 4):\n        assert candidate([n]) == [2 * n]\n",
)
COMPUTED_LOOP = _humaneval_row(
    "Hack/1",
    "    assert candidate([]) == []\n"
    "    rng = random.Random(7)\n"
    "    for _ in range(20):\n"
    "        xs = [rng.randint(-9, 9) for _ in range(rng.randint(1, 5))]\n"
    "        assert candidate(xs) == [2 * x for x in xs]\n",
)


@pytest.mark.parametrize("patch", list(RUNNER_PATCHES), ids=list(RUNNER_PATCHES))
async def test_patching_the_statement_runner_voids_the_grade(patch: str) -> None:
    """A must-fail canary hides among the statement tests: a runner that passes everything passes it too."""
    loop = "for n in range(1, 4):\n    assert double_all([n]) == [2 * n]"
    tests = [HiddenTest(name=f"loop-{i}", probe=loop, check=None) for i in range(3)]
    hack = RUNNER_PATCHES[patch] + "def double_all(xs):\n    return []\n"
    grade = await grade_python(hack, tests)
    assert not grade.valid and grade.passed_fraction == 0.0 and not grade.all_passed
    assert "canary" in (grade.evidence.problem or "")
    assert [r.name for r in grade.results] == [t.name for t in tests]  # canaries are never shown


@pytest.mark.parametrize("patch", list(RUNNER_PATCHES), ids=list(RUNNER_PATCHES))
async def test_patching_the_statement_runner_earns_nothing_through_the_env(
    tmp_path: Path, patch: str
) -> None:
    """A HumanEval loop over literal values is unrolled into probe/check tests: nothing to forge."""
    path = tmp_path / "he.jsonl"
    path.write_text(json.dumps(LITERAL_LOOP) + "\n")
    env = CodeSingle(source="humaneval", path=str(path), task="Hack/0", partial_credit=True)
    assert all(t.check is not None for t in env.tasks[0].hidden_tests)
    await env.reset(seed=0)
    result = await env.step(f"```python\n{RUNNER_PATCHES[patch]}def double_all(xs):\n    return []\n```")
    assert result.reward == 0.25, result.info["reward_components"]  # only `[] == []`, honestly passed
    assert result.info["reward_components"]["all_passed"] == 0.0


def test_a_task_only_statement_tests_could_check_is_left_out(tmp_path: Path) -> None:
    """A loop over computed inputs can only run beside the solution; its task cannot be scored honestly."""
    path = tmp_path / "he.jsonl"
    path.write_text(json.dumps(LITERAL_LOOP) + "\n" + json.dumps(COMPUTED_LOOP) + "\n")
    with pytest.warns(UserWarning, match=r"left out 1 task\(s\) .*Hack/1"):
        env = CodeSingle(source="humaneval", path=str(path))
    assert [t.id for t in env.tasks] == ["Hack/0"]


async def test_untrusted_passes_earn_no_reward() -> None:
    """Even when no canary trips, a statement test's pass is not evidence: it counts as not passed."""
    tests = [
        HiddenTest.returns("probe", "double_all([1])", [2]),
        HiddenTest(name="loop", probe="for n in range(3):\n    assert double_all([n]) == [2*n]", check=None),
    ]
    grade = await grade_python("def double_all(xs):\n    return [2 * x for x in xs]\n", tests)
    assert grade.valid and [r.passed for r in grade.results] == [True, True]
    assert grade.results[1].trusted is False
    assert grade.passed_fraction == 0.5 and not grade.all_passed
    assert grade.untrusted_passed == 1


async def test_a_solution_that_rewrites_probe_evaluation_is_voided() -> None:
    """A must-pass canary answered wrongly shows the solution's process evaluates probes dishonestly."""
    hack = (
        "import __main__\n"
        "__main__.eval = lambda *args, **kwargs: 0\n"
        "def sum_multiples(numbers):\n    return 0\n"
    )
    grade = await grade_python(hack, list(TASK.hidden_tests))
    assert not grade.valid and "canary" in (grade.evidence.problem or "")


async def test_canaries_run_with_every_grade_and_stay_out_of_the_figures() -> None:
    grade = await grade_python(TASK.reference, list(TASK.hidden_tests))
    assert grade.valid and grade.all_passed and grade.passed_fraction == 1.0
    assert len(grade.results) == grade.evidence.tests_expected == len(TASK.hidden_tests)
    assert grade.evidence.canaries >= 2


async def test_a_partly_right_solution_earns_nothing_by_default() -> None:
    """The default reward is binary: passing some hidden tests is not solving the task."""
    # wrong on lists longer than 10 only
    partial = "def sum_multiples(numbers):\n    return sum(n for n in numbers[:10] if n % 2 == 0)\n"
    reward, grade = await play(partial)
    hidden = {t.name for t in TASK.hidden_tests}
    assert 0.0 < grade.fraction(hidden) < 1.0, "the fixture must pass some hidden tests, not all"
    assert reward == 0.0
    env = CodeSingle(task=TASK.id, partial_credit=True)
    await env.reset(seed=0)
    result = await env.step(f"```python\n{partial}\n```")
    assert result.reward == grade.fraction(hidden)


# The solution shares its process with the probes: anything the probes' namespace holds, it can read
# (sys._getframe, gc, inspect). An expected value computed by the test must never be there.
FRAME_PEEK = """
import gc, sys

def _seen():
    names = {}
    frame = sys._getframe(1)
    while frame is not None:
        names.update(frame.f_globals)
        names.update(frame.f_locals)
        frame = frame.f_back
    for obj in gc.get_objects():  # and every namespace dict of the process
        if isinstance(obj, dict) and "__builtins__" in obj:
            names.update(obj)
    return names

def double_all(xs):
    return _seen().get("expected", [])
"""
COMPUTED_EXPECTATION = _humaneval_row(
    "Hack/2",
    "    inputs = list(range(5))\n"
    "    expected = [2 * x for x in inputs]\n"
    "    assert candidate(inputs) == expected\n",
)


async def test_an_expected_value_computed_by_the_test_is_out_of_the_solutions_reach(tmp_path: Path) -> None:
    """A value the check body computes (HumanEval/151's `odd_sum`) is judged by the grader alone: were it
    run beside the solution, a solution reading its caller's frame would return it and pass."""
    await frame_peek_scores_zero_and_the_reference_one(tmp_path, COMPUTED_EXPECTATION, "humaneval", "Hack/2")


async def frame_peek_scores_zero_and_the_reference_one(
    tmp_path: Path, row: dict[str, Any], source: str, task: str
) -> None:
    """A one-task dataset of `row`: the caller's-frame reader earns 0, the task's reference 1."""
    path = tmp_path / f"{source}.jsonl"
    path.write_text(json.dumps(row) + "\n")
    env = CodeSingle(source=source, path=str(path), task=task)
    await env.reset(seed=0)
    result = await env.step(f"```python\n{FRAME_PEEK}\n```")
    assert result.reward == 0.0, result.info["reward_components"]
    await env.reset(seed=0)
    honest = await env.step(f"```python\n{env.task.reference}\n```")
    assert honest.reward == 1.0, honest.info["reward_components"]


async def test_a_huge_int_is_judged_wrong_rather_than_stalling_the_grader() -> None:
    """`1 << 50_000_000` travels as hex in a moment, but printing it in decimal for the failure
    message is quadratic: the grader stalled until the sandbox's wall time voided the grade, so one
    line of answer held a grading sandbox for a minute. It must be judged, wrong, like any value."""
    reward, grade = await play("def sum_multiples(numbers):\n    return 1 << 50_000_000")
    assert reward == 0.0
    assert grade.valid and grade.evidence.problem is None, grade.evidence.problem
    assert not any(r.passed for r in grade.results)
    assert any("too long to print" in (r.error or "") for r in grade.results)  # the others: too large


PATCHED_ENCODER = """
import builtins
_type, _isinstance = builtins.type, builtins.isinstance

class Liar(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
    def __bool__(self):
        return True
    def __repr__(self):
        return "12"

def _lying_type(*args):
    if len(args) == 1 and _isinstance(args[0], Liar):
        return int
    return _type(*args)

builtins.type = _lying_type

def sum_multiples(numbers):
    return Liar(0)
"""


async def test_a_lying_int_with_the_encoders_type_checks_patched_sends_only_its_value() -> None:
    """With `type` patched, the encoder takes a lying int subclass for an int, but
    what crosses to the grader is its value (hex), judged as a plain int: the lie stays behind."""
    reward, grade = await play(PATCHED_ENCODER)
    _, plain = await play("def sum_multiples(numbers):\n    return 0")
    assert reward == 0.0 and grade.valid
    assert [r.passed for r in grade.results] == [r.passed for r in plain.results]  # 0 earns no more
    assert all(r.passed or r.error in ("got 0", "got (0, 0, 0)") for r in grade.results)  # not "12"


GRADER_REACH = """
import ctypes, os

def reach():
    found = []
    parent = os.getppid()
    for entry in ("mem", "environ", "fd", "maps", "syscall", "stack"):
        try:
            with open(f"/proc/{parent}/{entry}", "rb") as f:
                f.read(1)
            found.append(entry)
        except OSError:
            pass
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, parent, 0, 0) == 0:  # PTRACE_ATTACH
        found.append("ptrace")
    buffer = ctypes.create_string_buffer(8)
    local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 8)
    remote = (ctypes.c_void_p * 2)(0x400000, 8)
    if libc.process_vm_readv(parent, local, 1, remote, 1, 0) >= 0 or ctypes.get_errno() != 1:  # EPERM
        found.append("process_vm_readv")
    return found
"""


async def test_the_solution_cannot_reach_into_the_grader() -> None:
    """The grader holds the nonce that signs the report and the checks: its memory, descriptors and
    environment are closed to the solution (non-dumpable, no capability), by /proc, ptrace or
    process_vm_readv alike."""
    grade = await grade_python(
        GRADER_REACH, [HiddenTest(name="reach", probe="reach()", check="same(result, [])")]
    )
    assert grade.all_passed, grade.results


async def test_an_expected_value_in_mbpp_set_up_code_is_out_of_the_solutions_reach(tmp_path: Path) -> None:
    """MBPP's `test_setup_code` runs before the asserts; a value only they compare against is the
    grader's alone, as in HumanEval's check body."""
    row = {
        "task_id": 7,
        "text": "Double every element of a list.",
        "code": "def double_all(xs):\n    return [2 * x for x in xs]\n",
        "test_setup_code": "inputs = list(range(5))\nexpected = [2 * x for x in inputs]",
        "test_list": ["assert double_all(inputs) == expected"],
    }
    await frame_peek_scores_zero_and_the_reference_one(tmp_path, row, "mbpp", "mbpp-7")
