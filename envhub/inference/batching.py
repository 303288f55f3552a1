"""Requests of concurrent episodes that arrive at about the same time share one model call.

A local model runs one batch far faster than the same inputs one by one, but episodes ask
independently. `MicroBatcher` collects the items that arrive while the model is busy (or within
`max_wait` seconds of each other) and hands them to one blocking `run_batch` call in a worker thread.
Only items with equal options (e.g. temperature) share a call. Used by the transformers policy, the
local reward model and the trainer's vLLM engine.

`max_wait` is a quiet gap, not a fixed delay after the first item: episodes that start together reach
the model over a spread of set-up work (env reset, prompt rendering), and a fixed 5 ms window cut the
trainer's 32 requests of a step into two vLLM calls of 10-14 and 18-22 (each taking as long as one of
32), doubling its rollout. `max_delay` bounds the wait when arrivals never pause.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Options = TypeVar("Options", bound=Hashable)
Result = TypeVar("Result")


@dataclass
class _Request(Generic[Item, Options, Result]):
    item: Item
    options: Options
    future: asyncio.Future[Result]


@dataclass
class _Queue(Generic[Item, Options, Result]):
    """Items waiting in one event loop, and the task that drains them into batches."""

    waiting: deque[_Request[Item, Options, Result]] = field(default_factory=deque)
    drainer: asyncio.Task[None] | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


class MicroBatcher(Generic[Item, Options, Result]):
    """Queues items per event loop and runs them `batch_size` at a time through `run_batch`.

    `run_batch(items, options)` must return one result per item, in order. It runs in a worker
    thread (`asyncio.to_thread`, or what `runner` names: a model's batches go to the process's tensor
    thread, `envhub.inference.tensor_thread`), so it may block; a failure is raised in every caller of
    that batch, and the batcher goes on.
    A call starts when `batch_size` items wait, when none arrived for `max_wait` seconds, or
    `max_delay` seconds after the wait began (default: 50 x `max_wait`).
    """

    def __init__(
        self,
        run_batch: Callable[[list[Item], Options], list[Result]],
        *,
        batch_size: int,
        max_wait: float,
        max_delay: float | None = None,
        runner: Callable[..., Awaitable[Any]] = asyncio.to_thread,
    ) -> None:
        if batch_size < 1 or max_wait < 0:
            raise ValueError(f"need batch_size >= 1 and max_wait >= 0; got {batch_size} and {max_wait}")
        if max_delay is not None and max_delay < max_wait:
            raise ValueError(f"need max_delay >= max_wait; got {max_delay} and {max_wait}")
        self.run_batch = run_batch
        self.runner = runner
        self.batch_size = batch_size
        self.max_wait = max_wait
        self.max_delay = 50 * max_wait if max_delay is None else max_delay
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Queue[Item, Options, Result]] = (
            weakref.WeakKeyDictionary()
        )

    async def submit(self, item: Item, options: Options) -> Result:
        """This item's result, computed in a batch with whatever else is waiting."""
        loop = asyncio.get_running_loop()
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _Queue()
        future: asyncio.Future[Result] = loop.create_future()
        queue.waiting.append(_Request(item, options, future))
        queue.arrived.set()
        if queue.drainer is None or queue.drainer.done():
            queue.drainer = loop.create_task(self._drain(queue))
        return await future

    async def _drain(self, queue: _Queue[Item, Options, Result]) -> None:
        while queue.waiting:
            await self._gather(queue)
            options = queue.waiting[0].options
            batch = [r for r in queue.waiting if r.options == options][: self.batch_size]
            for request in batch:
                queue.waiting.remove(request)
            batch = [r for r in batch if not r.future.done()]  # callers that were cancelled
            if not batch:
                continue
            try:
                results = await self.runner(self.run_batch, [r.item for r in batch], options)
            except BaseException as exc:
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            for request, result in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(result)

    async def _gather(self, queue: _Queue[Item, Options, Result]) -> None:
        """Let episodes that ask together share the call: wait until arrivals pause for `max_wait`."""
        if self.max_wait <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_delay
        while len(queue.waiting) < self.batch_size:
            left = deadline - loop.time()
            if left <= 0:
                return
            queue.arrived.clear()
            try:
                await asyncio.wait_for(queue.arrived.wait(), timeout=min(self.max_wait, left))
            except TimeoutError:
                return  # a quiet gap: whoever was going to ask together has asked
