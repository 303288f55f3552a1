"""envhub-miniwob: the MiniWoB++ tasks of the `miniwob` package in envhub's browser family."""

from envhub_miniwob.catalog import tasks
from envhub_miniwob.env import MiniWoBEnv
from envhub_miniwob.solutions import SOLUTIONS

__all__ = ["SOLUTIONS", "MiniWoBEnv", "tasks"]
