"""The processes of a data-parallel run: started here, or joined when torchrun (or the caller) started them.

`train(config)` with `data_parallel: N` keeps rank 0 in the calling process and spawns ranks 1..N-1.
Rank 0 is the rank that rolls out, logs and calls `on_step`, so for the caller nothing moves: the CLI's
progress bar gets its rows directly, `train` returns them, an error keeps its type, and environments the
caller registered in-process are there (the spawned ranks only train, so they need none).

No rank waits forever for a failed one: rank 0 tells the others to stop when it fails between steps
(`grpo._train`), a rank whose peer died gets an error from gloo in its next collective, and when rank 0
ends with an error the ranks spawned here are joined briefly, then terminated; a rank that failed first
is the one whose traceback is raised.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch.distributed as dist
from torch.distributed import TCPStore  # type: ignore[attr-defined]  # public, but not marked exported
from torch.multiprocessing.spawn import ProcessContext, spawn

from envhub_trainer import distributed
from envhub_trainer.config import TrainConfig

log = logging.getLogger(__name__)

BACKEND = "gloo"
"""The trainer computes on CPU (see `distributed.shard`), which NCCL cannot reduce: ranks talk over gloo."""

TIMEOUT = timedelta(hours=6)
"""How long a collective may wait. Between steps the other ranks wait for rank 0's rollouts,
evaluation and checkpoint, which can take long with slow environments: torch's 30 minutes is too short."""

GRACE_SECONDS = 10.0
"""After rank 0 fails: how long the spawned ranks get to stop on their own (or to report their error)."""


@contextmanager
def ranks(config: TrainConfig, train: Callable[[TrainConfig], object]) -> Iterator[None]:
    """Run the body as rank 0 of `config.data_parallel` processes, spawning the others with `train` as
    their entry point; as the rank torchrun or the caller made this process; or, for one process, as is."""
    world = config.data_parallel
    started = _torchrun_world()
    if distributed.active():
        _check(dist.get_world_size(), world, "the process group this process is in has")
        yield
    elif started is not None and world > 1:
        _check(started, world, "torchrun started")
        dist.init_process_group(BACKEND, timeout=TIMEOUT)  # rank, world and rendezvous from torchrun's env
        try:
            yield
        finally:
            _leave()
    elif started is not None:
        _check(started, world, "torchrun started")
        yield
    elif world > 1:
        with _spawned(world, config, train):
            yield
    else:
        yield


def _torchrun_world() -> int | None:
    if all(key in os.environ for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return int(os.environ["WORLD_SIZE"])
    return None


def _check(processes: int, world: int, where: str) -> None:
    if processes != world:
        raise ValueError(
            f"{where} {processes} processes but the config says data_parallel: {world}; "
            f"make them equal (set data_parallel: {processes}, or start {world} processes)"
        )


@contextmanager
def _spawned(world: int, config: TrainConfig, train: Callable[[TrainConfig], object]) -> Iterator[None]:
    """This process as rank 0 and `world - 1` spawned ranks, which meet at a store on a port the OS
    picked (no race for a free port)."""
    store = TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False)
    arguments = (world, store.port, train, config)
    children = spawn(_spawned_rank, args=arguments, nprocs=world - 1, join=False)  # type: ignore[no-untyped-call]
    try:
        dist.init_process_group(BACKEND, store=store, rank=0, world_size=world, timeout=TIMEOUT)
    except BaseException as error:
        _stop(children, error)
        raise
    try:
        yield
    except BaseException as error:
        _stop(children, error)
        raise
    else:
        while not children.join():  # each call returns when one more rank ends; raises if it failed
            pass
    finally:
        _leave()


def _spawned_rank(
    index: int, world: int, port: int, train: Callable[[TrainConfig], object], config: TrainConfig
) -> None:
    """A spawned rank's entry point: join rank 0's process group, then train (as a follower)."""
    store = TCPStore("127.0.0.1", port, world, is_master=False)
    dist.init_process_group(BACKEND, store=store, rank=index + 1, world_size=world, timeout=TIMEOUT)
    try:
        train(config)
    finally:
        _leave()


def _leave() -> None:
    """Destroy the process group, then free the sharded model's reference cycles now. Left to the
    interpreter's exit, freeing them aborted about one process in five ("terminate called without an
    active exception", after gathering DTensors over gloo; torch 2.13)."""
    dist.destroy_process_group()
    gc.collect()


def _stop(children: ProcessContext, error: BaseException) -> None:
    """Rank 0 failed: give the spawned ranks `GRACE_SECONDS` to end (after rank 0's stop signal, or with
    their own error), raise a rank's error if it failed (it likely caused rank 0's), then end the rest."""
    deadline = time.monotonic() + GRACE_SECONDS
    try:
        while not children.join(timeout=max(deadline - time.monotonic(), 0.0)):
            if time.monotonic() >= deadline:
                break
    except Exception as failed:  # a spawned rank's traceback (join has terminated the others)
        raise failed from error
    finally:
        for process in children.processes:
            if process.is_alive():
                log.warning("rank 0 failed: terminating spawned rank (pid %d)", process.pid)
                process.terminate()
                process.join()
