"""Which tasks (env seeds) each step trains on: in order, or a curriculum by recent pass rate."""

from __future__ import annotations

import random
from collections import deque
from typing import Any


class TaskSampler:
    """Seeds in order from `start`, or (curriculum) drawn from a pool weighted by p(1-p).

    The curriculum spends rollouts where there is signal: a task always solved or never solved gives
    every episode of its group the same reward, hence zero advantage. Such tasks are skipped once seen
    `min_visits` times, and `counts()` says how many.
    """

    def __init__(
        self, start: int, *, curriculum: bool = False, pool: int = 256, seed: int = 0, min_visits: int = 2
    ) -> None:
        self.start, self.curriculum, self.pool, self.min_visits = start, curriculum, pool, min_visits
        self.position = 0
        self.rng = random.Random(seed)
        self.history: dict[int, deque[float]] = {}

    def draw(self, n: int) -> list[int]:
        if not self.curriculum:
            seeds = list(range(self.start + self.position, self.start + self.position + n))
            self.position += n
            return seeds
        candidates = [s for s in range(self.start, self.start + self.pool) if not self._skipped(s)]
        if len(candidates) < n:  # everything learnt or hopeless: fall back to the whole pool
            candidates = list(range(self.start, self.start + self.pool))
        # Weighted sampling without replacement (Efraimidis-Spirakis keys u^(1/w)).
        keyed = sorted(candidates, key=lambda s: -(self.rng.random() ** (1 / self._weight(s))))
        self.position += n
        return keyed[:n]

    def update(self, seed: int, pass_rate: float) -> None:
        """Record the pass rate of one task's group this step (the last four are kept)."""
        self.history.setdefault(seed, deque(maxlen=4)).append(pass_rate)

    def _weight(self, seed: int) -> float:
        recent = self.history.get(seed)
        if not recent:
            return 0.25  # unseen: as valuable as a task solved half the time
        p = sum(recent) / len(recent)
        return max(p * (1 - p), 0.01)

    def _skipped(self, seed: int) -> bool:
        recent = self.history.get(seed)
        if recent is None or len(recent) < self.min_visits:
            return False
        return len(set(recent)) == 1 and recent[0] in (0.0, 1.0)

    def counts(self) -> dict[str, int]:
        """How many pool tasks are skipped as always solved and as never solved."""
        skipped = [s for s in self.history if self._skipped(s)]
        solved = sum(1 for s in skipped if self.history[s][0] == 1)
        return {"tasks_always_solved": solved, "tasks_never_solved": len(skipped) - solved}

    def state_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "rng": self.rng.getstate(),
            "history": {str(k): list(v) for k, v in self.history.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = int(state["position"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.history = {int(k): deque(v, maxlen=4) for k, v in state["history"].items()}
