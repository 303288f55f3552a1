"""Graders that run outside the agent's reach (hidden tests in a fresh sandbox); reusable by any plugin.

    from envhub.grading import HiddenTest, grade_python
    report = await grade_python(code, [HiddenTest.returns("t1", "add(2, 3)", 5)])
    report.passed_fraction, report.all_passed, report.evidence

`docs/rewards.md` explains how the grade is computed and which reward hacks each part stops. The
package was `envhub.verifiers`, a name the well-known `verifiers` library owns (and
`envhub.integrations.verifiers` plays its environments); that old name is gone.
"""

from envhub.grading.python_tests import (
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
