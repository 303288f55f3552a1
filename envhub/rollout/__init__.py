"""Running episodes in batch and summarising them; `rollout()` is the entry point for every caller."""

from envhub.rollout.batch import RolloutResult, error_rate_problem, failed, fresh_run_dir, rollout
from envhub.rollout.ray_runner import RayEpisodePool
from envhub.rollout.runner import (
    BatchResult,
    EpisodeRef,
    RolloutLimits,
    Unit,
    UnitRunner,
    drive,
    plan,
    run_batch,
    run_episode,
    run_fork_group,
)
from envhub.rollout.summary import BatchSummary, summarize, summary_table

__all__ = [
    "BatchResult",
    "BatchSummary",
    "EpisodeRef",
    "RayEpisodePool",
    "RolloutLimits",
    "RolloutResult",
    "Unit",
    "UnitRunner",
    "drive",
    "error_rate_problem",
    "failed",
    "fresh_run_dir",
    "plan",
    "rollout",
    "run_batch",
    "run_episode",
    "run_fork_group",
    "summarize",
    "summary_table",
]
