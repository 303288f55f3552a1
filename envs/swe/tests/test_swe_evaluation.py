# ruff: noqa: E501
from __future__ import annotations

import pytest
from envhub_swe.canaries import Canaries, Canary
from envhub_swe.data import load_lite, load_mini
from envhub_swe.evaluation import adapt_eval_script, cut_test_output, grade_log
from envhub_swe.patches import Guard, filter_patch, runner_paths
from test_swe_data import LITE, needs_lite


@needs_lite
def test_every_real_eval_script_adapts_with_only_the_runtime_changed() -> None:
    rows = load_lite("test", LITE) + load_lite("dev", LITE)
    for row in rows:
        steps = adapt_eval_script(
            row.eval_script, activation=". /venv/bin/activate", testbed="/work/repo", skip_install=True
        )
        script = steps.setup + steps.test_script()
        assert "conda activate" not in script and "/opt/miniconda3" not in script
        assert "pip install" not in steps.setup.split("EOF_114329324912")[0]
        assert steps.setup.count(". /venv/bin/activate") == 1
        assert "cd /work/repo" in steps.setup and "cd /testbed" not in script
        assert ". /venv/bin/activate" in steps.shell_state and "cd /work/repo" in steps.shell_state
        assert steps.test_command in row.eval_script and ">>>>>" not in steps.test_command
        patch_text = row.eval_script.split("<<'EOF_114329324912'\n")[1].split("\nEOF_114329324912")[0]
        assert patch_text in steps.setup  # the test patch is never rewritten
        assert "git apply" not in steps.test_script()  # the test run only runs the tests


@needs_lite
def test_the_test_run_keeps_the_setups_shell_state() -> None:
    """django's rows export a locale before the tests; the separate test command must see it too."""
    row = next(r for r in load_lite("test", LITE) if "export LANG" in r.eval_script)
    steps = adapt_eval_script(row.eval_script)
    assert "export LANG=en_US.UTF-8" in steps.shell_state and "set -uxo pipefail" in steps.shell_state
    assert "conda activate testbed" in steps.shell_state and "python -m pip install" in steps.setup


def test_cut_at_markers_after_merging_set_x_stderr() -> None:
    log = "+ git apply -v -\n+ : '>>>>> Start Test Output'\n+ pytest -rA\nPASSED a.py::t\n+ : '>>>>> End Test Output'\nx\n"
    assert cut_test_output(log) == "+ pytest -rA\nPASSED a.py::t"
    assert cut_test_output("no markers here") is None


def _hunk(path: str) -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-a\n+b\n"


def test_patch_filter_drops_tests_and_test_configuration() -> None:
    paths = (
        "pkg/core.py",
        "tests/test_core.py",
        "conftest.py",
        "pkg/conftest.py",
        "sitecustomize.py",
        "setup.cfg",
    )
    filtered = filter_patch("".join(_hunk(p) for p in paths))
    assert list(filtered.dropped) == list(paths[1:])
    assert filtered.kept == _hunk("pkg/core.py") and filtered.kept_paths == ("pkg/core.py",)


@needs_lite
def test_no_gold_patch_of_lite_touches_a_dropped_path() -> None:
    for row in load_lite("test", LITE) + load_lite("dev", LITE):
        filtered = filter_patch(row.patch)
        assert (filtered.kept, filtered.dropped) == (row.patch, {})


ROW = load_mini()[0]  # mini__textkit-1, pytest style
F2P, P2P = ROW.FAIL_TO_PASS, ROW.PASS_TO_PASS
CANARIES = Canaries(
    tests=tuple(
        Canary(
            file="tests/test_text.py",
            name=name,
            test_id=f"tests/test_text.py::TestAbc::{name}",
            must_fail=must_fail,
            original=P2P[0],
            selector=f"tests/test_text.py::TestAbc::{name}",
        )
        for name, must_fail in (("test_aa_keeps", False), ("test_bb_breaks", True))
    )
)
CANARY_LINES = "PASSED tests/test_text.py::TestAbc::test_aa_keeps\nFAILED tests/test_text.py::TestAbc::test_bb_breaks - AssertionError\n"
ALL_PASS = (
    "=== short test summary info ===\n"
    + "".join(f"PASSED {t}\n" for t in F2P + P2P)
    + CANARY_LINES
    + "=== 1 failed, 7 passed in 0.1s ==="
)


def test_resolved_needs_every_listed_test_and_records_fractions() -> None:
    report = grade_log(ROW, ALL_PASS, exit_code=1, canaries=CANARIES)
    assert report.resolved and report.fail_to_pass.fraction == 1.0 and report.problem is None
    assert report.canary == "passed"
    partial = ALL_PASS.replace(f"PASSED {P2P[0]}", f"FAILED {P2P[0]} - boom")
    report = grade_log(ROW, partial, exit_code=1, canaries=CANARIES)
    assert not report.resolved and report.pass_to_pass.failed == [P2P[0]]
    assert report.pass_to_pass.fraction == pytest.approx(4 / 5)


def test_a_listed_test_absent_from_the_log_is_missing_not_failed() -> None:
    skipped = ALL_PASS.replace(f"PASSED {F2P[0]}\n", "SKIPPED [1] tests/test_text.py:22: no numpy\n")
    report = grade_log(ROW, skipped, exit_code=1, canaries=CANARIES)
    assert not report.resolved
    assert report.fail_to_pass.missing == [F2P[0]] and report.fail_to_pass.failed == []
    assert "missing from the log" in report.summary()


@pytest.mark.parametrize("status", ["XPASS", "SKIPPED", "XFAIL"])
def test_honest_logs_with_xpass_skips_and_xfail_of_other_tests_are_never_void(status: str) -> None:
    """An unexpected pass of a test, listed or not, with the runner's exit 0, is an honest log."""
    log = ALL_PASS.replace("=== 1 failed", f"{status} tests/test_text.py::test_other\n=== 1 failed")
    assert grade_log(ROW, log, exit_code=1, canaries=CANARIES).resolved
    no_canary = log.replace(CANARY_LINES, "").replace("1 failed, ", "")
    assert grade_log(ROW, no_canary, exit_code=0).resolved


@pytest.mark.parametrize(
    ("log", "exit_code", "problem"),
    [
        ("".join(f"PASSED {t}\n" for t in F2P + P2P) + CANARY_LINES, 1, "never finished"),  # no closing line
        (ALL_PASS, 2, "exited 2"),  # pytest interrupted: collection errors
        (ALL_PASS, 137, "exited 137"),  # the runner was killed
        (ALL_PASS, None, "did not run"),
        (ALL_PASS, 0, "exited 0 but the log reports failures"),  # the must-fail canary failed: 0 is a lie
        (
            ALL_PASS.replace(
                "FAILED tests/test_text.py::TestAbc::test_bb_breaks",
                "PASSED tests/test_text.py::TestAbc::test_bb_breaks",
            ),
            0,
            "made to fail, was reported passed",
        ),
        (ALL_PASS.replace(CANARY_LINES, ""), 0, "missing from the log"),
    ],
)
def test_logs_that_cannot_be_trusted_score_zero(log: str, exit_code: int | None, problem: str) -> None:
    report = grade_log(ROW, log, exit_code=exit_code, canaries=CANARIES)
    assert not report.resolved and report.problem is not None and problem in report.problem
    assert report.fail_to_pass.passed == [] and report.pass_to_pass.passed == []
    assert report.canary == ("void" if "canary" in report.problem else "")


RUNNER_COMMAND = (
    "PYTHONWARNINGS='ignore::UserWarning' python scripts/run_suite.py --verbose pkg/tests/test_core.py"
)


def test_the_runner_and_modules_beside_it_cannot_be_changed() -> None:
    """The script the command starts is the runner, and its directory is first on its sys.path."""
    guard = Guard(environment=frozenset({"argparse", "unittest", "pkg"}), runner=runner_paths(RUNNER_COMMAND))
    guard = Guard(guard.environment, frozenset({"pkg", "scripts/run_suite"}), guard.runner)
    assert guard.runner == ("scripts/run_suite.py", "pkg/tests/test_core.py")
    paths = (
        "scripts/run_suite.py",
        "scripts/argparse.py",
        "unittest/__init__.py",
        "pkg/core.py",
        "scripts/util.py",
    )
    filtered = filter_patch("".join(_hunk(p) for p in paths), guard)
    assert filtered.kept_paths == ("pkg/core.py", "scripts/util.py")
    assert filtered.dropped == {
        "scripts/run_suite.py": "the test runner the eval script starts",
        "scripts/argparse.py": "shadows the environment's module 'argparse'",
        "unittest/__init__.py": "shadows the environment's module 'unittest'",
    }


@needs_lite
def test_no_gold_patch_of_lite_touches_the_runner_or_shadows_the_standard_library() -> None:
    import sys

    for row in load_lite("test", LITE) + load_lite("dev", LITE):
        command = adapt_eval_script(row.eval_script).test_command
        guard = Guard(environment=frozenset(sys.stdlib_module_names), runner=runner_paths(command))
        filtered = filter_patch(row.patch, guard)
        assert (filtered.kept, filtered.dropped) == (row.patch, {}), row.instance_id
