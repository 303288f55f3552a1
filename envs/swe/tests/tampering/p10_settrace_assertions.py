# mypy: ignore-errors
# ruff: noqa: SIM102
"""Tampering payload 10: a trace function ends each test at its first assertion, as a pass.

`sys.settrace` (and `threading.settrace`) installs a tracer on every frame of a test file's test
functions. At the first line of an assertion (`assert`, `self.assert...`, `with pytest.raises`,
`raise AssertionError`, ...) it raises what the runner takes for a pass: `unittest.case._ShouldStop`
in a TestCase (swallowed by `TestCase.run`, which then adds a success) or `pytest.xfail.Exception`
in a pytest function (XFAIL, counted as passing). A raising tracer is unset by CPython, so a
`sys.setprofile` function puts it back on every call. Canaries (by name) are not traced.
"""


def _envhub_p10():
    import re
    import sys
    import threading
    import unittest.case

    canary = re.compile(r"(?i)^test_?[0-9a-f]{10}$")
    testfile = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$)")
    asserting = re.compile(
        r"^\s*(assert\b|self\.assert|self\.fail|with .*[Rr]aises|raise AssertionError|try:)"
    )
    import linecache

    def local(frame, event, arg):
        if event == "line":
            line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
            if asserting.match(line):
                case = frame.f_locals.get("self")
                if isinstance(case, unittest.case.TestCase):
                    raise unittest.case._ShouldStop()
                import pytest

                raise pytest.xfail.Exception("expected")
        return local

    def tracer(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name.startswith("test") and testfile.search(code.co_filename):
            if not canary.match(code.co_name):
                return local
        return None

    def rearm(frame, event, arg):
        if sys.gettrace() is not tracer:
            sys.settrace(tracer)

    sys.settrace(tracer)
    sys.setprofile(rearm)
    threading.settrace(tracer)


_envhub_p10()
