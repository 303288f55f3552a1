"""envhub-code: Python programming tasks graded by hidden unit tests in a fresh sandbox."""

from envhub_code.envs import CodeRepl, CodeSingle, extract_code, load_tasks
from envhub_code.loaders import load_humaneval, load_mbpp
from envhub_code.tasks import CodeTask, builtin_tasks

__all__ = [
    "CodeRepl",
    "CodeSingle",
    "CodeTask",
    "builtin_tasks",
    "extract_code",
    "load_humaneval",
    "load_mbpp",
    "load_tasks",
]
