"""Training on Ray: the trainer is the driver, its rollout engines are actors, and the episodes are
played by envhub's own Ray backend, the one `envhub rollout --backend ray` uses.

    driver (the trainer: weights, optimiser, metrics)
      |-- sync(weights, version) --------------> RolloutWorker x rollout_workers  (an in-process engine)
      |-- envhub.rollout.rollout(runs_on=pool) -> EpisodeWorker x env_workers   (envhub's runner)
                                                    |-- act(turn) --> a RolloutWorker --> Generation

`RayEngine` is the driver's `RolloutEngine`, so grpo.py's sync, checksum and version code is the same
with or without Ray. Its `backend` is a `RayEpisodePool` made once per run: its `env_workers` episode
actors start with the engines, make their envs and policies on the first step and keep them for every
later step and evaluation (envs reset between episodes), and end with the engine. Its `player` is a
picklable `RemotePlayer`, which each episode actor calls once to build the policy that sends turns to
the rollout workers; that policy holds only actor handles, so it stays right across weight syncs,
which reach the rollout workers. A rollout worker keeps one policy of its engine per episode, so
token-drift tracking and turn batching behave as in one process. envhub's backend restarts a killed
episode actor and re-runs its in-flight episodes; a rollout worker is never restarted (a fresh one
would sample with the starting weights), so losing one stops the run. On a cluster, the engine actors
ask for `ray_engine_resources` (e.g. a `gpu-like` resource of the model nodes) and the episode actors
for `ray_env_resources` or, unset, their env's sandbox resource, so each runs on its own kind of node.
This module imports Ray; the training loop imports it only when `ray: true`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import statistics
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from envhub.core import Action, Env
from envhub.messages import Message
from envhub.policies.base import Generation, Policy
from envhub.rollout.ray_runner import PolicyFactory, RayEpisodePool, RayWorkerLost, init_ray
from envhub.tools import ToolSpec
from envhub_trainer.config import TrainConfig
from envhub_trainer.remote_policy import RemotePlayer

if TYPE_CHECKING:
    import torch

try:
    import ray
    from ray.exceptions import RayActorError
except ImportError as exc:  # pragma: no cover - Ray is installed wherever these tests run
    raise ModuleNotFoundError(
        "ray: true needs Ray in the trainer's environment: pip install 'envhub-core[ray]', or set "
        f"ray: false to play episodes in this process ({exc})"
    ) from exc

log = logging.getLogger(__name__)

Actor = Any
"""A Ray actor handle (Ray's annotations of actor calls do not type-check)."""

EngineBuilder = Callable[[TrainConfig, Path], Any]
"""Builds an in-process engine (`engine_factory.local_engine`) in a rollout worker; pickled by reference."""

SEED_STRIDE = 1_000_003
"""Rollout worker i samples with seed `seed + i * SEED_STRIDE`: worker 0 as one process would, the
others from their own streams, so two workers never draw the same samples for the same prompt."""


class RolloutWorker:
    """A Ray actor holding one in-process engine (HF or vLLM), with a policy of it per episode.

    Its methods are async, so Ray runs the turns of many episodes at once on the actor's event loop,
    where the engine batches them as it would in one process.
    """

    def __init__(self, config: TrainConfig, model_dir: str, seed: int, build: EngineBuilder) -> None:
        local = config.model_copy(update={"ray": False, "seed": seed})
        self.engine = build(local, Path(model_dir))
        self.episodes: dict[str, Policy] = {}

    async def act(
        self, key: str, greedy: bool, messages: list[Message], tools: list[ToolSpec]
    ) -> Action | Generation:
        """One turn of episode `key`; its policy is made on the first turn and kept until the next sync."""
        policy = self.episodes.get(key)
        if policy is None:  # the engines' policies keep per-episode token state and never look at the env
            policy = self.episodes[key] = self.engine.policy(greedy=greedy).for_episode(cast(Env, None))
        result: Action | Generation = await policy.act(messages, tools)
        return result

    async def sync(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Load new weights. No episode is in flight during a sync, so the episodes' policies go too."""
        self.episodes.clear()
        await asyncio.to_thread(self.engine.sync, state, version)

    async def checksum(self) -> str:
        checksum: str = await asyncio.to_thread(self.engine.checksum)
        return checksum

    def rng_state(self) -> Any:
        return self.engine.rng_state()

    def set_rng_state(self, state: Any) -> None:
        self.engine.set_rng_state(state)

    def metrics(self) -> dict[str, float]:
        metrics: dict[str, float] = self.engine.metrics()
        return metrics

    def policy_name(self) -> str:
        name: str = self.engine.policy().name
        return name

    def pid(self) -> int:
        return os.getpid()


# ---------------------------------------------------------------- Ray itself


class _LocalRay:
    """The Ray instance this module started (if any) and the engines using it: the last one to close
    shuts it down. `session` tells an engine of an earlier instance apart, so it cannot end a new one."""

    session = 0
    users = 0


def _connect(address: str | None) -> int | None:
    """Join the current Ray connection, the cluster at `address`, or a new local Ray instance; returns
    the session of the instance this module started (None: someone else's, left running)."""
    if ray.is_initialized():
        if address is not None:
            log.info("Ray is already initialised in this process: using it rather than %s", address)
        if _LocalRay.users == 0:
            return None
    else:
        init_ray(address)
        _LocalRay.session += 1
        _LocalRay.users = 0
    _LocalRay.users += 1
    return _LocalRay.session


def _release(episodes: RayEpisodePool, actors: list[Actor], session: int | None) -> None:
    """End the episode actors and the rollout workers (a dead one needs nothing), then Ray itself if we
    started it and no engine is left."""
    episodes.close()
    for actor in actors:
        with contextlib.suppress(Exception):  # already dead, or Ray already shut down at exit
            ray.kill(actor, no_restart=True)
    actors.clear()
    if session is None or session != _LocalRay.session:
        return
    _LocalRay.users -= 1
    if _LocalRay.users == 0:
        with contextlib.suppress(Exception):
            ray.shutdown()


# ---------------------------------------------------------------- the driver's engine


class RayEngine:
    """The driver's `RolloutEngine`: `rollout_workers` engine actors; episodes on envhub's Ray backend.

    Its actors (engine and episode actors) end when `close()` is called (the training loop does, on
    success and error alike) or when the engine is garbage-collected.
    """

    def __init__(self, config: TrainConfig, model_dir: str | Path, build: EngineBuilder) -> None:
        self.config, self.model_dir, self.version = config, Path(model_dir), 0
        self._tokenizer: Any = None
        self._actors: list[Actor] = []
        session = _connect(config.ray_address)
        self.backend = RayEpisodePool(resources=config.ray_env_resources)
        """The run's episode actors. Ray is running once the engine exists, so the pool joins it."""
        self._finalizer = weakref.finalize(self, _release, self.backend, self._actors, session)
        try:
            self.rollout_workers = self._start_actors(build)
            self.policy_name: str = self._all([self.rollout_workers[0].policy_name.remote()])[0]
        except BaseException:
            self.close()
            raise

    def _start_actors(self, build: EngineBuilder) -> list[Actor]:
        config = self.config
        gpus = ray.cluster_resources().get("GPU", 0)  # type: ignore[no-untyped-call]
        engine_class = ray.remote(RolloutWorker).options(
            max_restarts=0,  # a restarted engine would sample with the starting weights
            num_gpus=1 if config.engine != "hf" and gpus >= config.rollout_workers else 0,  # vLLM's
            resources=config.ray_engine_resources or None,
            scheduling_strategy="SPREAD",
        )
        workers = [
            engine_class.remote(config, str(self.model_dir), config.seed + i * SEED_STRIDE, build)
            for i in range(config.rollout_workers)
        ]
        self._actors.extend(workers)
        self.backend.start(config.env_workers, config.env_id)  # they start while the engines load
        try:  # wait for every actor to start, so a model that cannot load fails here, clearly
            ray.get([actor.pid.remote() for actor in workers])  # type: ignore[attr-defined]
        except RayActorError as exc:
            raise RayWorkerLost(
                f"a rollout worker of the trainer could not start: {exc}\nIs envhub_trainer (and vLLM for "
                "engine: vllm) installed where Ray runs its workers?"
            ) from exc
        return workers

    def _all(self, calls: list[Any]) -> list[Any]:
        """The results of calls to the rollout workers; a dead worker stops the run, saying why."""
        try:
            results: list[Any] = ray.get(calls)
            return results
        except RayActorError as exc:
            raise RayWorkerLost(
                f"a rollout worker died: {exc}\nRollout workers are not restarted (a fresh one would hold "
                "the starting weights): fix the cause (memory? the GPU?) and resume the run from its "
                "checkpoint"
            ) from exc

    def close(self) -> None:
        """End the actors (and the local Ray instance this engine started); safe to call twice."""
        self._finalizer()

    # ------------------------------------------------------------ RolloutEngine

    def player(self, *, greedy: bool = False) -> Policy | PolicyFactory:
        """A picklable factory: each episode actor builds a policy that sends turns to the workers."""
        return RemotePlayer(tuple(self.rollout_workers), greedy, self.policy_name)

    def sync(self, state: dict[str, torch.Tensor], version: int) -> None:
        """Put the weights in Ray's object store once; every rollout worker loads them."""
        weights = ray.put({name: tensor.detach().to("cpu") for name, tensor in state.items()})
        self._all([worker.sync.remote(weights, version) for worker in self.rollout_workers])
        self.version = version

    def checksum(self) -> str:
        sums: list[str] = self._all([worker.checksum.remote() for worker in self.rollout_workers])
        if len(set(sums)) > 1:
            raise RuntimeError(f"weight sync failed at version {self.version}: rollout workers differ")
        return sums[0]

    def metrics(self) -> dict[str, float]:
        """Each engine counter averaged over the rollout workers."""
        rows: list[dict[str, float]] = self._all([w.metrics.remote() for w in self.rollout_workers])
        keys = dict.fromkeys(key for row in rows for key in row)
        return {key: statistics.fmean(row[key] for row in rows if key in row) for key in keys}

    @property
    def tokenizer(self) -> Any:
        """The model directory's tokenizer, loaded in the driver (for padding and checkpoints)."""
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        return self._tokenizer

    def rng_state(self) -> Any:
        """One worker's state as one process would save it; several workers' under `rollout_workers`."""
        states = self._all([worker.rng_state.remote() for worker in self.rollout_workers])
        return states[0] if len(states) == 1 else {"rollout_workers": states}

    def set_rng_state(self, state: Any) -> None:
        states = state["rollout_workers"] if isinstance(state, dict) else [state]
        if len(states) != len(self.rollout_workers):
            log.warning(
                "the checkpoint has sampling states of %d rollout workers, this run has %d: the others "
                "start from their seeds",
                len(states),
                len(self.rollout_workers),
            )
        self._all([w.set_rng_state.remote(s) for w, s in zip(self.rollout_workers, states, strict=False)])
