"""Deprecated: the graders moved to `envhub.grading`, since `verifiers` is another library's name.

Everything `envhub.verifiers` exported still imports from here, with a DeprecationWarning; import it
from `envhub.grading` instead.
"""

import warnings

from envhub.grading import (
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

warnings.warn(
    "envhub.verifiers is now envhub.grading (the old name clashed with the verifiers library); "
    "import from envhub.grading instead",
    DeprecationWarning,
    stacklevel=2,
)
