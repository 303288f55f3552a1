"""The tensor thread: every caller's work on one thread, in place from that thread, errors handed back."""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import threading

import pytest

from envhub.inference.batching import MicroBatcher
from envhub.inference.tensor_thread import (
    is_tensor_thread,
    on_tensor_thread,
    submit_to_tensor_thread,
    to_tensor_thread,
)


def test_calls_from_many_threads_all_run_on_one_thread_that_is_none_of_theirs() -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as callers:
        ran = list(callers.map(lambda _: on_tensor_thread(threading.get_ident), range(20)))
    caller_threads = {threading.get_ident()}
    assert len(set(ran)) == 1
    assert not set(ran) & caller_threads
    assert on_tensor_thread(is_tensor_thread) and not is_tensor_thread()


def test_a_call_made_on_the_tensor_thread_runs_in_place_instead_of_waiting_on_itself() -> None:
    def outer() -> tuple[int, int]:
        return threading.get_ident(), on_tensor_thread(threading.get_ident)

    here, nested = submit_to_tensor_thread(outer).result(timeout=10)  # a deadlock would time out
    assert here == nested


def test_an_error_reaches_the_caller_from_the_thread_and_in_place() -> None:
    def fail() -> None:
        raise ValueError("bad weights")

    with pytest.raises(ValueError, match="bad weights"):
        on_tensor_thread(fail)
    in_place = on_tensor_thread(submit_to_tensor_thread, fail)
    assert in_place.done() and isinstance(in_place.exception(), ValueError)
    assert on_tensor_thread(lambda: 7) == 7  # the thread goes on after a failure


def test_a_torch_thread_count_set_after_the_thread_started_reaches_it_from_every_caller() -> None:
    torch = pytest.importorskip("torch", reason="the thread count to carry is torch's")
    before = torch.get_num_threads()
    on_tensor_thread(torch.get_num_threads)  # the thread has started and holds its own count
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            assert on_tensor_thread(torch.get_num_threads) == threads
            assert asyncio.run(to_tensor_thread(torch.get_num_threads)) == threads
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as other:  # a new thread takes it too
                assert other.submit(on_tensor_thread, torch.get_num_threads).result() == threads
    finally:
        torch.set_num_threads(before)
    assert on_tensor_thread(torch.get_num_threads) == before


async def test_the_event_loop_goes_on_while_the_tensor_thread_works() -> None:
    released = threading.Event()

    def wait_for_the_loop() -> bool:
        return released.wait(timeout=10)

    async def release() -> None:
        await asyncio.sleep(0.05)
        released.set()

    waited, _ = await asyncio.gather(to_tensor_thread(wait_for_the_loop), release())
    assert waited


async def test_a_batcher_given_the_tensor_thread_runs_its_batches_there() -> None:
    threads: set[int] = set()

    def run(items: list[int], options: None) -> list[int]:
        threads.add(threading.get_ident())
        return [2 * i for i in items]

    batcher: MicroBatcher[int, None, int] = MicroBatcher(
        run, batch_size=2, max_wait=0.01, runner=to_tensor_thread
    )
    assert await asyncio.gather(*(batcher.submit(i, None) for i in range(5))) == [0, 2, 4, 6, 8]
    assert threads == {on_tensor_thread(threading.get_ident)}


def _ident_in_child(queue: multiprocessing.Queue[tuple[bool, int]]) -> None:
    ident = on_tensor_thread(threading.get_ident)
    queue.put((ident != threading.get_ident(), ident))


def test_a_forked_child_gets_a_tensor_thread_of_its_own() -> None:
    on_tensor_thread(int)  # the parent's thread exists before the fork
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[tuple[bool, int]] = context.Queue()
    child = context.Process(target=_ident_in_child, args=(queue,), daemon=True)
    child.start()
    try:
        on_another_thread, _ = queue.get(timeout=30)  # a child waiting on its parent's thread never answers
        child.join(timeout=30)
    finally:
        child.kill()
    assert child.exitcode == 0
    assert on_another_thread
