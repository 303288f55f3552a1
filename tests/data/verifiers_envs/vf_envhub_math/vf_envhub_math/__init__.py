"""Single-turn sums scored by verifiers' boxed-answer check (a verifiers v1 taskset)."""

from vf_envhub_math.taskset import MathTask, MathTaskset

__all__ = ["MathTask", "MathTaskset"]
