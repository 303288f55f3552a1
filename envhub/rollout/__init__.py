"""Running episodes in batch and summarising them."""

from envhub.rollout.runner import run_batch, run_episode
from envhub.rollout.summary import BatchSummary, summarize, summary_table

__all__ = ["BatchSummary", "run_batch", "run_episode", "summarize", "summary_table"]
