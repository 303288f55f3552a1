from __future__ import annotations

from envhub_swe.parsers import (
    PARSERS,
    Status,
    finished,
    parse_django,
    parse_pytest,
    parse_seaborn,
    parse_sympy,
)

PYTEST_OWN_SUITE = """\
============================= test session starts ==============================
collected 3 items

testing/test_runner.py ..F                                                [100%]

==================================== PASSES ====================================
___________________________ test_nested_run_reports ____________________________
----------------------------- Captured stdout call -----------------------------
============================= test session starts ==============================
collected 1 item

test_nested_run_reports.py F                                             [100%]
=========================== short test summary info ============================
FAILED testing/test_runner.py::test_other - assert 0
============================== 1 failed in 0.01s ===============================
=========================== short test summary info ============================
PASSED testing/test_runner.py::test_nested_run_reports
PASSED testing/test_runner.py::test_other
FAILED testing/test_runner.py::test_broken - AssertionError: boom
SKIPPED [1] testing/test_runner.py:40: could not import 'numpy': No module named 'numpy'
ERROR: file or directory not found: testing/test_gone.py
========================= 1 failed, 2 passed, 1 skipped in 0.52s ===============
"""


def test_pytest_takes_the_outer_summary_and_ignores_nested_and_error_colon_lines() -> None:
    results = parse_pytest(PYTEST_OWN_SUITE)
    assert results == {
        "testing/test_runner.py::test_nested_run_reports": Status.PASSED,
        "testing/test_runner.py::test_other": Status.PASSED,  # the nested FAILED line does not count
        "testing/test_runner.py::test_broken": Status.FAILED,
    }
    assert "file" not in results and "[1]" not in results  # `ERROR:` and skip lines carry no ids
    assert finished("parse_log_pytest", PYTEST_OWN_SUITE)


def test_pytest_options_keep_the_last_path_part_of_a_parameter() -> None:
    log = "=== short test summary info ===\nPASSED tests/test_a.py::test_x[/tmp/pytest-1/data.txt]\n"
    assert PARSERS["parse_log_pytest_options"](log) == {"tests/test_a.py::test_x[/data.txt]": Status.PASSED}


def test_matplotlib_normalises_mouse_buttons() -> None:
    log = "PASSED lib/matplotlib/tests/test_widgets.py::test_span[MouseButton.LEFT]\n"
    assert PARSERS["parse_log_matplotlib"](log) == {
        "lib/matplotlib/tests/test_widgets.py::test_span[1]": Status.PASSED
    }


def test_seaborn_reads_verbose_lines_and_summaries() -> None:
    log = (
        "tests/test_core.py::TestSemanticMapping::test_call_lookup PASSED      [ 10%]\n"
        "tests/test_core.py::TestHueMapping::test_init_from_map FAILED        [ 20%]\n"
        "FAILED tests/test_core.py::TestHueMapping::test_init_from_map - KeyError\n"
    )
    assert parse_seaborn(log) == {
        "tests/test_core.py::TestSemanticMapping::test_call_lookup": Status.PASSED,
        "tests/test_core.py::TestHueMapping::test_init_from_map": Status.FAILED,
    }


DJANGO = """\
Testing against Django installed in '/testbed/django'
Importing application test_utils
test_override_file_upload_permissions (test_utils.tests.OverrideSettingsTests) ... ok
test_media_root (test_utils.tests.OverrideSettingsTests) ... FAIL
test_skip (test_utils.tests.SkippingTest) ... skipped 'Database has feature(s) foo'
test_noisy (test_utils.tests.NoisyTests) ... System check identified no issues (0 silenced).
ok
test_crash (test_utils.tests.CrashTests) ... ERROR

======================================================================
ERROR: test_crash (test_utils.tests.CrashTests)
----------------------------------------------------------------------
FAIL: test_media_root (test_utils.tests.OverrideSettingsTests)
----------------------------------------------------------------------
Ran 5 tests in 0.120s

FAILED (failures=1, errors=1, skipped=1)
"""


def test_django_runner_with_split_ok_lines_and_full_ids_from_headers() -> None:
    results = parse_django(DJANGO)
    assert (
        results["test_override_file_upload_permissions (test_utils.tests.OverrideSettingsTests)"]
        == Status.PASSED
    )
    assert results["test_media_root (test_utils.tests.OverrideSettingsTests)"] == Status.FAILED
    assert results["test_skip (test_utils.tests.SkippingTest)"] == Status.SKIPPED
    assert results["test_noisy (test_utils.tests.NoisyTests)"] == Status.PASSED
    assert results["test_crash (test_utils.tests.CrashTests)"] == Status.ERROR
    assert "test_crash" not in results  # the official parser's `ERROR:` first-word id
    assert finished("parse_log_django", DJANGO)


SYMPY = """\
============================= test process starts ==============================
executable:         /opt/miniconda3/envs/testbed/bin/python  (3.9.19-final-0) [CPython]

sympy/printing/tests/test_ccode.py[3]
test_printmethod ok
test_ccode_Relational ok
test_ccode_sinc F
sympy/printing/tests/test_fcode.py[2]
test_printmethod F
test_fcode_sign ok

________________________________________________________________________________
_____________ sympy/printing/tests/test_ccode.py:test_ccode_sinc _______________
AssertionError
============ tests finished: 3 passed, 2 failed, in 0.30 seconds ===============
"""


def test_sympy_bare_names_pass_only_where_every_file_passed() -> None:
    results = parse_sympy(SYMPY)
    assert results["test_ccode_Relational"] == Status.PASSED
    assert results["test_ccode_sinc"] == Status.FAILED
    assert results["test_printmethod"] == Status.FAILED  # passed in test_ccode.py, failed in test_fcode.py
    assert results["sympy/printing/tests/test_ccode.py:test_printmethod"] == Status.PASSED
    assert finished("parse_log_sympy", SYMPY)
    assert not finished("parse_log_sympy", SYMPY.rsplit("=====", 3)[0])


# The end of a real run (sympy__sympy-24066, empty patch, canaries added): the failing canary made the
# summary wider than the terminal, so bin/test wrapped it and dropped its `=` borders.
SYMPY_WRAPPED = """test_prefixed_property ok
test_cdf9a8d71d F                                                         [FAIL]

________________________________________________________________________________
_____ sympy/physics/units/tests/test_quantities.py:test_cdf9a8d71d ______
AssertionError

 tests finished: 32 passed, 1 failed, 1 expected to fail, 1 exceptions,
in 1.32 seconds
DO *NOT* COMMIT!
"""


def test_sympy_summary_wrapped_over_lines_still_closes_the_run() -> None:
    """An honest run must never look unfinished: a wrapped summary is the runner's own closing line."""
    assert finished("parse_log_sympy", SYMPY_WRAPPED)
    assert not finished("parse_log_sympy", SYMPY_WRAPPED.split("in 1.32 seconds")[0])  # cut short
    assert not finished("parse_log_sympy", "test_a ok\nfinished in 1.2 seconds\n")  # not the summary


def test_every_lite_parser_name_is_known() -> None:
    lite = {
        "parse_log_django", "parse_log_sympy", "parse_log_matplotlib", "parse_log_scikit", "parse_log_pytest",
        "parse_log_sphinx", "parse_log_astropy", "parse_log_requests", "parse_log_pylint", "parse_log_xarray",
        "parse_log_seaborn", "parse_log_flask",
    }  # fmt: skip
    assert lite <= set(PARSERS)
