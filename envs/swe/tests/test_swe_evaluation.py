# ruff: noqa: E501
from __future__ import annotations

import pytest
from envhub_swe.data import load_lite, load_mini
from envhub_swe.evaluation import EXIT, adapt_eval_script, cut_test_output, filter_patch, grade_log
from test_swe_data import LITE, needs_lite


@needs_lite
def test_every_real_eval_script_adapts_with_only_the_runtime_changed() -> None:
    rows = load_lite("test", LITE) + load_lite("dev", LITE)
    for row in rows:
        script = adapt_eval_script(
            row.eval_script,
            nonce="n0",
            activation=". /venv/bin/activate",
            testbed="/work/repo",
            skip_install=True,
        )
        assert "conda activate" not in script and "/opt/miniconda3" not in script
        assert "pip install" not in script.split("EOF_114329324912")[0]
        assert script.count(". /venv/bin/activate") == 1
        assert "cd /work/repo" in script and "cd /testbed" not in script
        assert f"echo \"{EXIT} n0: $?\"\n: '>>>>> End Test Output'" in script
        patch_text = row.eval_script.split("<<'EOF_114329324912'\n")[1].split("\nEOF_114329324912")[0]
        assert patch_text in script  # the test patch is never rewritten


@needs_lite
def test_official_images_keep_their_activation_and_install() -> None:
    row = load_lite("test", LITE)[0]
    script = adapt_eval_script(row.eval_script, nonce="n0")
    assert "conda activate testbed" in script and "python -m pip install" in script


def test_cut_at_markers_after_merging_set_x_stderr() -> None:
    log = "+ git apply -v -\n+ : '>>>>> Start Test Output'\n+ pytest -rA\nPASSED a.py::t\n+ : '>>>>> End Test Output'\nx\n"
    assert cut_test_output(log) == "+ pytest -rA\nPASSED a.py::t"
    assert cut_test_output("no markers here") is None


def test_patch_filter_drops_tests_and_test_configuration() -> None:
    patch = "".join(
        f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1 @@\n-a\n+b\n"
        for p in (
            "pkg/core.py",
            "tests/test_core.py",
            "conftest.py",
            "pkg/conftest.py",
            "sitecustomize.py",
            "setup.cfg",
        )
    )
    kept, dropped = filter_patch(patch)
    assert dropped == [
        "tests/test_core.py",
        "conftest.py",
        "pkg/conftest.py",
        "sitecustomize.py",
        "setup.cfg",
    ]
    assert "pkg/core.py" in kept and "conftest" not in kept


@needs_lite
def test_no_gold_patch_of_lite_touches_a_dropped_path() -> None:
    for row in load_lite("test", LITE) + load_lite("dev", LITE):
        assert filter_patch(row.patch) == (row.patch, [])


def _log(body: str, code: int) -> str:
    return f"+ : '>>>>> Start Test Output'\n{body}\n{EXIT} n1: {code}\n+ : '>>>>> End Test Output'\n"


ROW = load_mini()[0]  # mini__textkit-1, pytest style
F2P, P2P = ROW.FAIL_TO_PASS, ROW.PASS_TO_PASS
ALL_PASS = (
    "=== short test summary info ===\n"
    + "".join(f"PASSED {t}\n" for t in F2P + P2P)
    + "=== 6 passed in 0.1s ==="
)


def test_resolved_needs_every_listed_test_and_records_fractions() -> None:
    report = grade_log(ROW, _log(ALL_PASS, 0), nonce="n1")
    assert report.resolved and report.fail_to_pass.fraction == 1.0 and report.problem is None
    partial = ALL_PASS.replace(f"PASSED {P2P[0]}", f"FAILED {P2P[0]} - boom").replace(
        "6 passed", "1 failed, 5 passed"
    )
    report = grade_log(ROW, _log(partial, 1), nonce="n1")
    assert not report.resolved and report.pass_to_pass.failed == [P2P[0]]
    assert report.pass_to_pass.fraction == pytest.approx(4 / 5)


def test_a_listed_test_absent_from_the_log_is_missing_not_failed() -> None:
    skipped = ALL_PASS.replace(f"PASSED {F2P[0]}\n", "SKIPPED [1] tests/test_text.py:22: no numpy\n")
    report = grade_log(ROW, _log(skipped, 0), nonce="n1")
    assert not report.resolved
    assert report.fail_to_pass.missing == [F2P[0]] and report.fail_to_pass.failed == []
    assert "missing from the log" in report.summary()


@pytest.mark.parametrize(
    ("log", "problem"),
    [
        (_log("".join(f"PASSED {t}\n" for t in F2P + P2P), 0), "never finished"),  # no closing line
        (_log(ALL_PASS, 2), "exited 2"),  # pytest interrupted: collection errors
        (_log(ALL_PASS + f"\nFAILED {F2P[0]}", 0), "exited 0 but the log reports failures"),
        (_log(ALL_PASS, 0).replace("n1: 0", "other: 0"), "exit status is missing"),  # wrong nonce
        (ALL_PASS, "no test output"),
    ],
)
def test_logs_that_cannot_be_trusted_score_zero(log: str, problem: str) -> None:
    report = grade_log(ROW, log, nonce="n1")
    assert not report.resolved and report.problem is not None and problem in report.problem
    assert report.fail_to_pass.passed == [] and report.pass_to_pass.passed == []
