"""A provider's two limits: how many sandboxes may be open at once (`Quota`) and how fast new ones may
be made (`TokenBucket`)."""

from __future__ import annotations

import time
from collections.abc import Callable


class Quota:
    """At most `limit` sandboxes held at once (None: no cap); taking never blocks, the fleet decides."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.in_use = 0

    @property
    def full(self) -> bool:
        return self.limit is not None and self.in_use >= self.limit

    def try_take(self) -> bool:
        if self.full:
            return False
        self.in_use += 1
        return True

    def take_anyway(self) -> None:
        """Count one more even past the limit: a fork lands on its parent's provider or nowhere."""
        self.in_use += 1

    def give_back(self) -> None:
        if self.in_use <= 0:
            raise RuntimeError("a quota was given back more often than it was taken")
        self.in_use -= 1


class TokenBucket:
    """A token bucket: `rate` creations per second on average, up to `burst` at once after a quiet spell.

    A small class rather than a library (aiolimiter and the like wait on the event loop's own clock):
    `reserve` only does the arithmetic, so a test can drive it with a fake clock, and callers are served
    in the order they reserved, each told how long to wait.
    """

    def __init__(self, rate: float, burst: int = 1, *, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a token bucket needs rate > 0 and burst >= 1 (got rate={rate}, burst={burst})")
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._updated = clock()

    def reserve(self) -> float:
        """Take a token (borrowing one not yet earned): the seconds to wait before using it."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
