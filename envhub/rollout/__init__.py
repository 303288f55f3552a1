"""Running episodes in batch and summarising them."""

from envhub.rollout.runner import BatchResult, RolloutLimits, run_batch, run_episode
from envhub.rollout.summary import BatchSummary, summarize, summary_table

__all__ = [
    "BatchResult",
    "BatchSummary",
    "RolloutLimits",
    "run_batch",
    "run_episode",
    "summarize",
    "summary_table",
]
