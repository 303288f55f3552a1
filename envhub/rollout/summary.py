"""Summaries of a batch of episodes, as numbers and as a rich table."""

from __future__ import annotations

import statistics
from collections import Counter

from pydantic import BaseModel
from rich.table import Table

from envhub.records import Episode


class BatchSummary(BaseModel):
    env_id: str
    policy: str
    episodes: int
    reward_mean: float
    reward_std: float
    solved: float
    """Fraction of episodes whose return reached at least 1.0 (every reward component satisfied)."""
    turns_mean: float
    truncated: int
    errors: dict[str, int]
    components: dict[str, float]
    wall_seconds: float | None
    """The batch's wall time when it is known (a live run); None for a batch read back from disk."""

    @property
    def episodes_per_second(self) -> float | None:
        if self.wall_seconds is None or self.wall_seconds <= 0:
            return None
        return self.episodes / self.wall_seconds


def summarize(episodes: list[Episode], *, wall_seconds: float | None = None) -> BatchSummary:
    if not episodes:
        raise ValueError("no episodes to summarize")
    rewards = [e.reward for e in episodes]
    names = sorted({name for e in episodes for name in e.reward_components})
    return BatchSummary(
        env_id=episodes[0].env_id,
        policy=episodes[0].policy,
        episodes=len(episodes),
        reward_mean=statistics.fmean(rewards),
        reward_std=statistics.pstdev(rewards),
        solved=sum(r >= 1.0 for r in rewards) / len(rewards),
        turns_mean=statistics.fmean(len(e.turns) for e in episodes),
        truncated=sum(e.truncated for e in episodes),
        errors=dict(Counter(e.error.kind for e in episodes if e.error)),
        components={
            name: statistics.fmean(e.reward_components.get(name, 0.0) for e in episodes) for name in names
        },
        wall_seconds=wall_seconds,
    )


def summary_table(summary: BatchSummary) -> Table:
    table = Table(title=f"{summary.env_id} · policy {summary.policy}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("episodes", f"{summary.episodes}"),
        ("reward mean ± std", f"{summary.reward_mean:.3f} ± {summary.reward_std:.3f}"),
        ("solved (return ≥ 1)", f"{summary.solved:.1%}"),
        ("turns per episode", f"{summary.turns_mean:.2f}"),
        ("truncated", f"{summary.truncated}"),
        ("errors", ", ".join(f"{k}: {v}" for k, v in summary.errors.items()) or "0"),
        *((f"component · {name}", f"{value:.3f}") for name, value in summary.components.items()),
    ]
    if summary.wall_seconds is not None and summary.episodes_per_second is not None:
        rows += [
            ("wall time", f"{summary.wall_seconds:.2f} s"),
            ("episodes / s", f"{summary.episodes_per_second:.1f}"),
        ]
    for row in rows:
        table.add_row(*row)
    return table
