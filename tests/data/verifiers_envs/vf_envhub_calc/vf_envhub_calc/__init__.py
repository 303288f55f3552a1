"""Products found with a calculator tool (a verifiers v1 taskset with a Toolset)."""

from vf_envhub_calc.taskset import CalcTask, CalcTaskset

__all__ = ["CalcTask", "CalcTaskset"]
