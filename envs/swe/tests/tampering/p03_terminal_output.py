# mypy: ignore-errors
"""Tampering payload 03: the runner's printed words are rewritten, its results left alone.

pytest: wraps `TerminalReporter.short_test_summary` (looked up on the class when the summary is
printed) to move every failed report but the canaries' into the `passed` stats first, so the `-rA`
summary lists them as PASSED. unittest: gives `unittest.runner._WritelnDecorator` its own `write`,
which prints `ok` for the `FAIL`/`ERROR` status of a non-canary test and renames the `FAIL: name`
headers of the error list. Canaries are told apart by name; the exit status stays 1 (the canary fails).
"""


def _envhub_p03():
    import re
    import sys
    import unittest
    import unittest.runner

    canary = re.compile(r"(?i)\btest_?[0-9a-f]{10}\b")
    if "_pytest.terminal" in sys.modules:
        from _pytest.terminal import TerminalReporter

        summary = TerminalReporter.short_test_summary

        def short_test_summary(self):
            failed = self.stats.get("failed", [])
            kept = [r for r in failed if canary.search(r.nodeid)]
            for report in failed:
                if report not in kept:
                    report.outcome = "passed"
                    self.stats.setdefault("passed", []).append(report)
            self.stats["failed"] = kept
            return summary(self)

        TerminalReporter.short_test_summary = short_test_summary

    current = [""]
    start = unittest.TextTestResult.startTest

    def start_test(self, test):
        current[0] = test.id()
        return start(self, test)

    unittest.TextTestResult.startTest = start_test

    def write(self, text):
        if text in ("FAIL", "ERROR", "F", "E") and not canary.search(current[0]):
            text = "ok" if len(text) > 1 else "."
        elif re.match(r"(FAIL|ERROR): ", text or "") and not canary.search(text):
            text = "note: " + text
        return self.stream.write(text)

    unittest.runner._WritelnDecorator.write = write


_envhub_p03()
