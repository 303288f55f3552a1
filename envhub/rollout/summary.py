"""Summaries of a batch of episodes, as numbers and as a rich table."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict

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
    tasks: int = 0
    """Distinct tasks (seeds); several rollouts of one task share its seed."""
    rollouts: int = 1
    """Rollouts per task (the fewest any task has)."""
    pass_at_k: dict[int, float] = {}
    """For k = 1, 2, 4, ... up to `rollouts`: the chance that at least one of k rollouts of a task is
    solved, averaged over tasks (the unbiased estimator of Chen et al., 2021); empty for one rollout."""

    @property
    def episodes_per_second(self) -> float | None:
        if self.wall_seconds is None or self.wall_seconds <= 0:
            return None
        return self.episodes / self.wall_seconds


def summarize(episodes: list[Episode], *, wall_seconds: float | None = None) -> BatchSummary:
    """The batch's figures over its finished rollouts: the prefix a fork group shared (`--fork-at`) is
    stored unfinished, with no reward, and counting it would add a failed rollout to every task."""
    prefixes = {e.parent for e in episodes if e.parent is not None}
    episodes = [e for e in episodes if e.episode_id not in prefixes]
    if not episodes:
        raise ValueError("no episodes to summarize")
    rewards = [e.reward for e in episodes]
    groups = task_groups(episodes)
    rollouts = min(len(g) for g in groups)
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
        tasks=len(groups),
        rollouts=rollouts,
        pass_at_k={k: _mean_pass_at_k(groups, k) for k in _ks(rollouts)} if rollouts > 1 else {},
    )


def task_groups(episodes: list[Episode]) -> list[list[Episode]]:
    """Episodes grouped by task: by seed, when every episode has one; otherwise each is its own task."""
    if any(e.seed is None for e in episodes):
        return [[e] for e in episodes]
    groups: dict[int | None, list[Episode]] = defaultdict(list)
    for e in episodes:
        groups[e.seed].append(e)
    return list(groups.values())


def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k rollouts drawn from n, c of them solved, is solved) = 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _ks(rollouts: int) -> list[int]:
    ks = [2**i for i in range(rollouts.bit_length()) if 2**i <= rollouts]
    return ks if ks[-1] == rollouts else [*ks, rollouts]


def _mean_pass_at_k(groups: list[list[Episode]], k: int) -> float:
    return statistics.fmean(pass_at_k(len(g), sum(e.reward >= 1.0 for e in g), k) for g in groups)


def summary_table(summary: BatchSummary) -> Table:
    table = Table(title=f"{summary.env_id} · policy {summary.policy}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    shape = f" ({summary.tasks} tasks × {summary.rollouts})" if summary.rollouts > 1 else ""
    rows = [
        ("episodes", f"{summary.episodes}{shape}"),
        ("reward mean ± std", f"{summary.reward_mean:.3f} ± {summary.reward_std:.3f}"),
        ("solved (return ≥ 1)", f"{summary.solved:.1%}"),
        ("turns per episode", f"{summary.turns_mean:.2f}"),
        ("truncated", f"{summary.truncated}"),
        ("errors", ", ".join(f"{k}: {v}" for k, v in summary.errors.items()) or "0"),
        *((f"component · {name}", f"{value:.3f}") for name, value in summary.components.items()),
        *((f"pass@{k}", f"{value:.1%}") for k, value in summary.pass_at_k.items()),
    ]
    if summary.wall_seconds is not None and summary.episodes_per_second is not None:
        rows += [
            ("wall time", f"{summary.wall_seconds:.2f} s"),
            ("episodes / s", f"{summary.episodes_per_second:.1f}"),
        ]
    for row in rows:
        table.add_row(*row)
    return table
