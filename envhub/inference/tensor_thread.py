"""The one thread a process's tensor work runs on: model loading, generation, weight syncs, training steps.

One thread, for two reasons, both measured on `make bench-trl`'s trainer (2 cores):

- OpenMP. libgomp keeps a team of worker threads for every thread that starts parallel work, for as
  long as that thread lives. Once the process holds more workers than cores, every worker stops spinning
  between parallel regions (libgomp's "throttled" spin: 100 turns instead of ~300,000) and sleeps on a
  futex instead, so each of a step's thousands of parallel regions waits for its workers to wake. The
  trainer loaded its model on the main thread, ran vLLM on a thread of its own and its steps on a third:
  three teams, and a training step took 7.9-9.0 s with 35,000 context switches, against 5.2-5.8 s and
  7,000 with every tensor op on one thread (`benchmarks/train_step_speed.py --with-vllm`).
- malloc. glibc gives each thread an arena of its own and reuses a thread's freed memory for that
  thread's next allocations; steps handed to whichever thread of a pool was idle left each step's
  activations in another arena (`envhub_trainer.memory`).

A call made on the tensor thread itself runs in place (a submit would wait on itself). Work from
different callers takes turns: an asynchronous trainer's generation waits for its training step, and
the reverse, which on a CPU is what two jobs that each want every core should do anyway.

Each call carries its caller's torch thread count over. PyTorch keeps that count per thread (OpenMP's
is each thread's own) and a thread takes the process's setting only when it first runs tensor work, so
a `torch.set_num_threads` made after the tensor thread started would otherwise never reach the thread
where the work runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_local = threading.local()
_lock = threading.Lock()
_executor: concurrent.futures.ThreadPoolExecutor | None = None


def on_tensor_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Call `fn` on the tensor thread and wait for its result."""
    return submit_to_tensor_thread(fn, *args, **kwargs).result()


async def to_tensor_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`asyncio.to_thread`, on the tensor thread: the event loop goes on while `fn` runs."""
    return await asyncio.wrap_future(submit_to_tensor_thread(fn, *args, **kwargs))


def submit_to_tensor_thread(
    fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> concurrent.futures.Future[T]:
    """`fn`'s future, for a caller that waits with a timeout; on the tensor thread, already done."""
    if not is_tensor_thread():
        call = functools.partial(fn, *args, **kwargs)
        threads = _torch_threads()
        if threads is not None:
            call = functools.partial(_with_torch_threads, threads, call)
        return _tensor_executor().submit(call)
    done: concurrent.futures.Future[T] = concurrent.futures.Future()
    try:
        done.set_result(fn(*args, **kwargs))
    except BaseException as exc:  # the caller's .result() raises it, as a pool's future would
        done.set_exception(exc)
    return done


def is_tensor_thread() -> bool:
    return bool(getattr(_local, "is_tensor_thread", False))


def _tensor_executor() -> concurrent.futures.ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="envhub-tensors", initializer=_mark
            )
        return _executor


def _torch_threads() -> int | None:
    """The calling thread's torch thread count, where torch is loaded; envhub itself does not need it."""
    torch = sys.modules.get("torch")
    get = getattr(torch, "get_num_threads", None)  # None too while torch is half imported
    return int(get()) if get is not None else None


def _with_torch_threads(threads: int, call: Callable[[], T]) -> T:
    torch = sys.modules["torch"]
    if torch.get_num_threads() != threads:  # a change resizes the OpenMP team: only when asked
        torch.set_num_threads(threads)
    return call()


def _mark() -> None:
    _local.is_tensor_thread = True


def _forget_in_child() -> None:
    """A forked child has no copy of the thread: its first call starts its own."""
    global _executor, _lock
    _executor, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
