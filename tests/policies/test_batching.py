"""The micro-batcher behind the HF policy, the reward model and the vLLM engine: who shares a call."""

from __future__ import annotations

import asyncio
import threading

import pytest

from envhub.inference.batching import MicroBatcher


class Recorder:
    """A `run_batch` that answers each item doubled and records every call it got."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[tuple[list[int], str]] = []
        self.threads: set[int] = set()
        self.fail_on = fail_on

    def __call__(self, items: list[int], options: str) -> list[int]:
        self.calls.append((items, options))
        self.threads.add(threading.get_ident())
        if self.fail_on in items:
            raise RuntimeError(f"model failed on {self.fail_on}")
        return [2 * i for i in items]


async def test_items_that_arrive_together_share_calls_of_at_most_batch_size() -> None:
    run = Recorder()
    batcher = MicroBatcher(run, batch_size=3, max_wait=0.01)
    results = await asyncio.gather(*(batcher.submit(i, "t=1") for i in range(7)))
    assert results == [2 * i for i in range(7)]
    assert [len(items) for items, _ in run.calls] == [3, 3, 1]
    assert threading.get_ident() not in run.threads  # the blocking call ran off the event loop


async def test_only_items_with_equal_options_share_a_call() -> None:
    run = Recorder()
    batcher = MicroBatcher(run, batch_size=8, max_wait=0.01)
    await asyncio.gather(*(batcher.submit(i, "greedy" if i % 2 else "sampled") for i in range(6)))
    assert sorted((options, items) for items, options in run.calls) == [
        ("greedy", [1, 3, 5]),
        ("sampled", [0, 2, 4]),
    ]


async def test_a_failed_call_fails_its_callers_and_the_batcher_goes_on() -> None:
    run = Recorder(fail_on=1)
    batcher = MicroBatcher(run, batch_size=2, max_wait=0.01)
    outcomes = await asyncio.gather(*(batcher.submit(i, "x") for i in range(4)), return_exceptions=True)
    assert [str(o) if isinstance(o, Exception) else o for o in outcomes] == [
        "model failed on 1",
        "model failed on 1",
        4,
        6,
    ]


async def staggered(batcher: MicroBatcher[int, str, int], count: int, gap: float) -> list[int]:
    """`count` callers that ask `gap` seconds apart, as episodes finishing their set-up do."""

    async def ask(i: int) -> int:
        await asyncio.sleep(i * gap)
        return await batcher.submit(i, "x")

    return await asyncio.gather(*(ask(i) for i in range(count)))


async def test_callers_that_keep_arriving_within_max_wait_share_one_call() -> None:
    run = Recorder()
    batcher = MicroBatcher(run, batch_size=32, max_wait=0.05)
    # 8 arrivals 10 ms apart span 70 ms, longer than max_wait: a fixed window would split them
    assert await staggered(batcher, 8, gap=0.01) == [2 * i for i in range(8)]
    assert [items for items, _ in run.calls] == [list(range(8))]


async def test_a_pause_longer_than_max_wait_starts_the_call() -> None:
    run = Recorder()
    batcher = MicroBatcher(run, batch_size=32, max_wait=0.01)
    await staggered(batcher, 3, gap=0.3)
    assert [items for items, _ in run.calls] == [[0], [1], [2]]


async def test_max_delay_bounds_the_wait_when_arrivals_never_pause() -> None:
    run = Recorder()
    batcher = MicroBatcher(run, batch_size=100, max_wait=0.2, max_delay=0.2)
    await staggered(batcher, 12, gap=0.05)  # 550 ms of arrivals, never 200 ms apart
    assert len(run.calls) >= 2
    assert sorted(i for items, _ in run.calls for i in items) == list(range(12))


def test_bad_sizes_are_refused_with_the_values() -> None:
    with pytest.raises(ValueError, match="batch_size >= 1 and max_wait >= 0; got 0 and -1"):
        MicroBatcher(Recorder(), batch_size=0, max_wait=-1)
    with pytest.raises(ValueError, match=r"max_delay >= max_wait; got 0\.1 and 0\.2"):
        MicroBatcher(Recorder(), batch_size=1, max_wait=0.2, max_delay=0.1)
