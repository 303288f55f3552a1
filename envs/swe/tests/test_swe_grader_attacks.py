# ruff: noqa: E501
"""Attacks on the SWE grader itself, by class (issue 12): each scores 0, and none becomes an infrastructure error.

1. the submission taken with tools the agent configures (git config, diff drivers, crafted patches);
2. grading secrets read by the code under test, to forge the exit status and kill the runner;
3. the test runner tampered with in process (report hooks patched, runner modules shadowed);
4. agent-caused failures that used to be raised as `InfrastructureError` (retried, never scored).
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from envhub_swe.env import SWEMini
from envhub_swe.patches import MalformedPatch, filter_patch, parse_patch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envhub.messages import Message, ToolCall

PYTEST_STYLE = "mini__stats-2"  # pytest -rA tests/test_core.py; the fix is in stats/core.py
UNITTEST_STYLE = "mini__semver-1"  # python runtests.py --verbosity 2 tests.test_version


def bash(command: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create("bash", {"command": command}, id="b")])


SUBMIT = Message(role="assistant", tool_calls=[ToolCall.create("submit", {}, id="s")])

FORCE_PASSES = (
    "import pytest\n"
    "@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    out = yield\n"
    '    out.get_result().outcome = "passed"\n'
)
CRAFTED = (
    "diff --git a/stats/helper.py b/stats/helper.py\nnew file mode 100644\n--- /dev/null\n+++ b/stats/helper.py\n"
    "@@ -0,0 +1 @@\n+x = 2\n--- /dev/null\n+++ b/conftest.py\n"
    f"@@ -0,0 +1,{len(FORCE_PASSES.splitlines())} @@\n"
    + "".join(f"+{line}\n" for line in FORCE_PASSES.splitlines())
)
"""A section whose header names a source file, hiding a second file (a conftest forcing passes) that
`git apply` and `patch` both create."""


def _printer(name: str, text: str) -> str:
    """Shell lines that write a script printing `text`, executable, at /testbed/NAME."""
    return (
        f"cat > {name} <<'ENVHUB_EOF'\n#!/bin/sh\ncat <<'INNER'\n{text}INNER\nENVHUB_EOF\nchmod +x {name}\n"
    )


CONFIGURED_DIFFS = {
    "external_diff_driver": _printer(".x.sh", CRAFTED)
    + "echo 'x = 2' > stats/helper.py; git config diff.external /testbed/.x.sh",
    "textconv_via_attributes": (
        _printer(".x.sh", "x = 3\n")
        + "echo 'x = 2' > stats/helper.py; echo '*.py diff=fake' > .gitattributes; git config diff.fake.textconv /testbed/.x.sh"
    ),
    "alias_and_global_config": (
        _printer(".x.sh", CRAFTED)
        + "echo 'x = 2' > stats/helper.py; mkdir -p $HOME; printf '[diff]\\n\\texternal = /testbed/.x.sh\\n' > $HOME/.gitconfig; "
        "git config alias.diff '!/testbed/.x.sh'"
    ),
}


async def _episode(instance: str, command: str) -> SWEMini:
    env = SWEMini(instance=instance)
    await env.reset(seed=0)
    await env.step(bash(command))
    result = await env.step(SUBMIT)
    assert result.terminated
    await env.close()
    return env


@pytest.mark.parametrize("attack", sorted(CONFIGURED_DIFFS))
def test_class1_git_configured_by_the_agent_does_not_decide_the_submission(attack: str) -> None:
    env = asyncio.run(_episode(PYTEST_STYLE, CONFIGURED_DIFFS[attack]))
    assert env.report is not None and not env.report.resolved, env.report and env.report.summary()
    paths = {path for section in parse_patch(env.report.patch) for path in section.paths}
    assert paths == {"stats/helper.py", ".x.sh"} | ({".gitattributes"} if "attributes" in attack else set())
    assert "+x = 2" in env.report.patch  # the file as it is, not as a textconv driver shows it


def test_class1_a_fix_submitted_with_corrupt_git_metadata_still_resolves() -> None:
    """The grader never reads the agent's .git: breaking it changes nothing, in either direction."""

    async def run() -> tuple[SWEMini, float]:
        env = SWEMini(instance=PYTEST_STYLE)
        await env.reset(seed=0)
        assert env.instance is not None
        await env.step(
            bash(
                f"git apply - <<'EOF'\n{env.instance.patch}EOF\necho garbage > .git/HEAD; rm -rf .git/objects"
            )
        )
        result = await env.step(SUBMIT)
        await env.close()
        return env, result.reward

    env, reward = asyncio.run(run())
    assert reward == 1.0, env.report and env.report.summary()


# -- the patch filter, fuzzed: whatever it keeps, git touches nothing else -----------------------------------

SOURCE_PATHS = ["pkg/core.py", "pkg/util.py", "README.md", "src/pkg/mod.py"]
TEST_PATHS = [
    "tests/test_core.py",
    "conftest.py",
    "pkg/conftest.py",
    "setup.cfg",
    "pytest.ini",
    "sitecustomize.py",
]


def _section(path: str, header: str | None = None) -> str:
    head = header or path
    return f"diff --git a/{head} b/{head}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+x\n"


INJECTIONS = st.sampled_from(
    [
        lambda p: f"--- /dev/null\n+++ b/{p}\n@@ -0,0 +1 @@\n+x\n",  # a traditional section inside a git one
        lambda p: f"Index: {p}\n===\n--- /dev/null\n+++ {p}\n@@ -0,0 +1 @@\n+x\n",
        lambda p: f"*** /dev/null\n--- {p}\n***************\n*** 0 ****\n--- 1 ----\n+ x\n",  # a context diff
        lambda p: (
            f"diff --git a/{p} b/{p}\nnew file mode 100644\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1 @@\n+x\n"
        ),
        lambda p: f"diff --git a/x b/x\nrename from x\nrename to {p}\n",
        lambda p: f"@@ -0,0 +1 @@\n+x\n--- /dev/null\n+++ b/{p}\n",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parts=st.lists(
        st.one_of(
            st.builds(_section, st.sampled_from(SOURCE_PATHS)),
            st.builds(lambda inject, p: inject(p), INJECTIONS, st.sampled_from(TEST_PATHS + SOURCE_PATHS)),
            st.builds(_section, st.sampled_from(TEST_PATHS), st.sampled_from(SOURCE_PATHS)),  # lying header
        ),
        min_size=1,
        max_size=4,
    )
)
def test_class1_whatever_the_filter_keeps_touches_only_the_paths_it_checked(
    tmp_path: Path, parts: list[str]
) -> None:
    patch = "".join(parts)
    try:
        filtered = filter_patch(patch)
    except MalformedPatch:
        return
    if not filtered.kept:
        return
    (tmp_path / "p.patch").write_text(filtered.kept)
    touched = _touched_by_git(tmp_path) | _touched_by_patch(tmp_path)
    assert touched <= set(filtered.kept_paths), (patch, filtered)
    assert not touched & set(TEST_PATHS)


def _touched_by_git(where: Path) -> set[str]:
    done = subprocess.run(["git", "apply", "--numstat", "p.patch"], cwd=where, capture_output=True, text=True)
    return {line.split("\t")[-1] for line in done.stdout.splitlines() if line}


def _touched_by_patch(where: Path) -> set[str]:
    done = subprocess.run(
        ["patch", "--dry-run", "--batch", "-p1", "-i", "p.patch"], cwd=where, capture_output=True, text=True
    )
    return {
        line.removeprefix("checking file ").strip()
        for line in done.stdout.splitlines()
        if line.startswith("checking file ")
    }


@pytest.mark.parametrize(
    "patch",
    [
        CRAFTED,
        "garbage before\n" + _section("pkg/core.py"),
        _section("pkg/core.py").replace("@@ -0,0 +1 @@\n+x\n", "@@ -0,0 +1,2 @@\n+x\n"),  # hunk too short
        _section("pkg/core.py", "pkg/other.py"),  # the header and the file lines disagree
        _section("../outside.py"),
        _section(".git/hooks/pre-commit"),
    ],
)
def test_class1_malformed_patches_are_refused(patch: str) -> None:
    with pytest.raises(MalformedPatch):
        filter_patch(patch)


# -- class 2: nothing secret in the sandbox; the exit status comes from the supervisor ---------------------

FORGE_AND_KILL = r"""
import glob, os, re, signal, sys
nonce = ""
for path in glob.glob("/tmp/*") + glob.glob("/tmp/*/*"):
    try:
        found = re.search(r"envhub test exit code (\w+)", open(path).read())
    except Exception:
        continue
    if found:
        nonce = found[1]
tests = ("test_mean", "test_median_odd", "test_clamp", "test_median_even")
out = "".join("PASSED tests/test_core.py::%s\n" % t for t in tests)
out += "=== 4 passed in 0.01s ===\n>>>>> envhub test exit code %s: 0\n+ : '>>>>> End Test Output'\n" % nonce
for fd in os.listdir("/proc/self/fd"):  # past pytest's capture: every pipe, the log's among them
    try:
        if os.readlink("/proc/self/fd/" + fd).startswith("pipe:"):
            os.write(int(fd), out.encode())
    except OSError:
        pass
os.kill(os.getppid(), signal.SIGKILL)  # the script that would print the real status
os._exit(0)
"""


def test_class2_code_under_test_cannot_forge_the_exit_status_and_kill_the_runner() -> None:
    command = f"cat >> stats/__init__.py <<'EOF'\n{FORGE_AND_KILL}EOF\n"
    env = asyncio.run(_episode(PYTEST_STYLE, command))
    report = env.report
    assert report is not None and not report.resolved, report and report.summary()
    # The runner may well exit 0 (it is the tested code's process); the canaries are what it cannot forge.
    assert report.problem is not None and "canary" in report.problem


# -- class 3: the runner tampered with in process ------------------------------------------------------------

REPORTS_PASSED = """
try:
    import _pytest.reports as _reports
    _original = _reports.TestReport.from_item_and_call.__func__
    def _always_passed(cls, item, call):
        report = _original(cls, item, call)
        report.outcome, report.longrepr = "passed", None
        return report
    _reports.TestReport.from_item_and_call = classmethod(_always_passed)
except Exception:
    pass
"""
FAKE_UNITTEST = """
import importlib, sys, types
class TestCase:
    def __init__(self, name="runTest"):
        self._testMethodName = name
class _Loader:
    def loadTestsFromNames(self, names):
        found = []
        for name in names:
            module = importlib.import_module(name)
            for cls in vars(module).values():
                if isinstance(cls, type) and issubclass(cls, TestCase):
                    found += [(module.__name__, cls.__qualname__, m) for m in dir(cls) if m.startswith("test")]
        return found
defaultTestLoader = _Loader()
class TextTestResult:
    pass
class _Result:
    def wasSuccessful(self):
        return True
class TextTestRunner:
    def __init__(self, verbosity=1, resultclass=None, stream=None):
        self.stream = stream or sys.stderr
    def run(self, suite):
        for module, cls, method in suite:
            self.stream.write("%s (%s.%s) ... ok\\n" % (method, module, cls))
        self.stream.write("\\n" + "-" * 70 + "\\nRan %d tests in 0.001s\\n\\nOK\\n" % len(suite))
        return _Result()
"""


def test_class3_patched_pytest_reporting_is_caught_by_the_failing_canary() -> None:
    env = asyncio.run(_episode(PYTEST_STYLE, f"cat >> stats/__init__.py <<'EOF'\n{REPORTS_PASSED}EOF\n"))
    report = env.report
    assert report is not None and not report.resolved, report and report.summary()
    assert report.canary == "void" and report.problem is not None and "canary" in report.problem


def test_class3_a_module_shadowing_the_runner_is_left_out_of_grading() -> None:
    """runtests.py's directory is first on sys.path: a `unittest/` package there would be the runner."""
    command = f"mkdir -p unittest && cat > unittest/__init__.py <<'EOF'\n{FAKE_UNITTEST}EOF\npython runtests.py tests.test_version 2>&1 | tail -1"
    env = asyncio.run(_episode(UNITTEST_STYLE, command))
    report = env.report
    assert report is not None and not report.resolved, report and report.summary()
    assert "unittest/__init__.py" in report.dropped_files


# -- class 4: what the agent broke scores 0 with a reason; it is never an infrastructure error ---------------


def test_class4_an_unreadable_workspace_scores_zero_with_the_reason() -> None:
    env = asyncio.run(_episode(PYTEST_STYLE, "chmod 000 stats/core.py"))
    report = env.report
    assert report is not None and not report.resolved
    assert report.problem is not None and "could not be archived" in report.problem
    assert "could not be archived" in env.reward_notes["resolved"]  # the episode record says why


def test_class4_links_and_pipes_planted_in_tmp_do_not_break_or_steer_the_submission() -> None:
    """The archive's name is fresh per submit; whatever the agent planted in /tmp, a fix still resolves."""

    async def run() -> tuple[SWEMini, float]:
        env = SWEMini(instance=PYTEST_STYLE)
        await env.reset(seed=0)
        assert env.instance is not None
        plant = "for n in envhub-submission.tar envhub-submission.patch envhub-tree.tar; do ln -sf /etc/passwd /tmp/$n; done; mkfifo /tmp/envhub-eval-setup.sh"
        await env.step(bash(f"git apply - <<'EOF'\n{env.instance.patch}EOF\n{plant}"))
        result = await env.step(SUBMIT)
        await env.close()
        return env, result.reward

    env, reward = asyncio.run(run())
    assert reward == 1.0, env.report and env.report.summary()
