"""The cyclic garbage collector's settings while a batch of episodes runs, and why.

CPython frees most objects by reference counting; its cyclic GC exists for reference cycles, and it
decides when to run by counting allocations, not garbage. A batch with thousands of episodes in flight
allocates fast, and the objects of an in-flight turn (its messages, the request, the connection's
state) live across the model's latency, so the young collections find them alive and promote them to
the oldest generation. CPython starts a full collection once the objects promoted since the last one
reach a quarter of those that survived it, counting promotions, not deaths: these turns' objects, dead
soon after, make full collections frequent, and each walks every tracked object of the process, every
in-flight episode and every finished record. At 5,000-20,000 episodes in flight that was 11-17 full
collections a minute, pauses of up to 3.5-6.5 s on a loaded 2-core host, and 41-54% of the client's
CPU, time in which no turn could finish (benchmarks/concurrency.py; docs/benchmarks.md).

`batch_gc()` changes three things for the duration of a batch, and puts them back after:

- `gc.freeze()` moves every object alive at the start (imported modules, the policy, the caller's
  state) out of the collector's sight: they are not garbage, and no collection need walk them again;
- the young generation's threshold is raised (700 -> `young` net allocations, and the middle's
  10 -> `middle` young collections), so an in-flight turn's objects are more often dead by the time a
  collection looks, and fewer are promoted;
- the oldest generation's threshold is raised (10 -> `old` middle collections), so full collections,
  the ones that walk the whole heap, are rare; they still run, so cycles that an env or a policy makes
  are still freed, later.

The hot path of a model-driven episode (runner, OpenAI policy, HTTP client) makes no reference cycles
per turn (tests/rollout/test_concurrency.py checks it), so nothing accumulates for want of a full
collection.
On exit the thresholds are restored and what was frozen is unfrozen (collected as usual from then on).
The collector's settings belong to the whole process: nested or concurrent batches share one policy
(the outermost sets it and restores it), and a process that froze objects itself before the batch (a
server that forks workers) keeps its frozen objects frozen.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

YOUNG = 50_000
"""Net new tracked objects before a young collection (CPython: 700)."""
MIDDLE = 20
"""Young collections before a middle one (CPython: 10)."""
OLD = 100
"""Middle collections before a full one is considered (CPython: 10; CPython also waits until the
objects promoted since the last full collection are a quarter of those that survived it)."""

_lock = threading.Lock()
_depth = 0
_saved: tuple[tuple[int, int, int], bool] | None = None


@contextlib.contextmanager
def batch_gc(*, young: int = YOUNG, middle: int = MIDDLE, old: int = OLD) -> Iterator[None]:
    """Run the body under the batch GC policy (the module's docstring says why); restored on exit."""
    if young < 1 or middle < 1 or old < 1:
        raise ValueError(f"need young, middle and old >= 1, got {young}, {middle} and {old}")
    _enter(young, middle, old)
    try:
        yield
    finally:
        _exit()


def _enter(young: int, middle: int, old: int) -> None:
    global _depth, _saved
    with _lock:
        _depth += 1
        if _depth > 1:
            return  # an outer batch set the policy
        froze = gc.get_freeze_count() == 0  # the caller's own frozen objects stay the caller's
        _saved = (gc.get_threshold(), froze)
        if froze:
            gc.freeze()
        gc.set_threshold(young, middle, old)


def _exit() -> None:
    global _depth, _saved
    with _lock:
        _depth -= 1
        if _depth > 0 or _saved is None:
            return
        threshold, froze = _saved
        _saved = None
        gc.set_threshold(*threshold)
        if froze:
            gc.unfreeze()
