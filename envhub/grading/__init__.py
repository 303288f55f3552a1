"""Programmatic verifiers that run outside the agent's reach; reusable by any environment plugin.

    from envhub.verifiers import HiddenTest, grade_python
    report = await grade_python(code, [HiddenTest.returns("t1", "add(2, 3)", 5)])
    report.passed_fraction, report.all_passed, report.evidence

`docs/rewards.md` explains how the grade is computed and which reward hacks each part stops.
"""

from envhub.verifiers.python_tests import (
    GRADE_POLICY,
    VERIFIER_HASH,
    GradeEvidence,
    GradeReport,
    HiddenTest,
    TestResult,
    grade_python,
)

__all__ = [
    "GRADE_POLICY",
    "VERIFIER_HASH",
    "GradeEvidence",
    "GradeReport",
    "HiddenTest",
    "TestResult",
    "grade_python",
]
