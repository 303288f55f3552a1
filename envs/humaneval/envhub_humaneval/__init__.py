"""envhub-humaneval: OpenAI's HumanEval in envhub's code family, graded by the hardened grader."""

from envhub_humaneval.env import HumanEval, task_id
from envhub_humaneval.problems import dataset_file, humaneval_tasks, problem_rows

__all__ = ["HumanEval", "dataset_file", "humaneval_tasks", "problem_rows", "task_id"]
