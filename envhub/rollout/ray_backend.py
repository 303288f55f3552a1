"""The Ray backend of `envhub rollout`: the same batch, its episodes spread over Ray actors.

Each actor builds the policy by calling a picklable factory (a live policy may hold clients or GPU
weights that do not pickle; `functools.partial(load_policy, "oracle")` is one) and keeps a small pool
of `EnvWorker`s, so environments and their sandboxes are made once per actor and reset between
episodes, exactly as in the asyncio runner. The driver hands out episode references, keeps at most
`limits.concurrency` in flight, and calls `on_episode` as each episode comes back, so the store,
resume and the progress bar work unchanged.

An env registered with `envhub.register` in the driver only (a script's, a test's, a training run's)
is sent to the actors and registered there too, since their processes never ran that call; plugin
envs are found by the actors' own registry.

A dead actor (its process killed, its node lost) is restarted by Ray, which re-runs the episodes it
had in flight; the driver sees each episode once. Ray is imported only when this backend runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from envhub.policies import Policy, load_policy
from envhub.records import Episode
from envhub.registration import Registration, UnknownEnvError, registry
from envhub.rollout.runner import BatchResult, EnvWorker, EpisodeRef, RolloutLimits, as_refs

PolicyFactory = Callable[[], Policy]
"""Builds the policy where the episodes run; it must pickle to reach a Ray worker."""

Actor = Any
"""A Ray handle to an `EpisodeWorker` actor (Ray's annotations of actor calls do not type-check)."""

ACTOR_RESTARTS = 3
"""How often Ray restarts one dead actor (re-running its in-flight episodes) before the batch stops."""

CLOSE_TIMEOUT = 30.0
"""Seconds the actors get to close their environments at the end of a batch before being killed."""


class RayWorkerLost(RuntimeError):
    """An actor died more often than Ray may restart it, or could not start: retrying more is pointless."""


def ray_address(backend: str) -> str | None:
    """The Ray address a `--backend` value names (None: a local instance), once Ray is known installed."""
    if backend not in ("ray", "auto") and not backend.startswith("ray://"):
        raise ValueError(f"unknown backend {backend!r}; expected local, ray, auto or ray://HOST:PORT")
    if importlib.util.find_spec("ray") is None:
        raise ModuleNotFoundError(f"the {backend!r} backend needs Ray: pip install 'envhub-core[ray]'")
    return None if backend == "ray" else backend


def init_ray(address: str | None) -> None:
    """Start a local Ray instance on this machine's cores (address None), or join the one at `address`."""
    import ray

    if address is None:
        ray.init(
            address="local",  # never join a stale cluster left in /tmp/ray
            num_cpus=os.cpu_count(),
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
    else:
        ray.init(address=address, logging_level=logging.WARNING)


class EpisodeWorker:
    """A Ray actor: one policy and a pool of environments, playing the episodes the driver sends it.

    Its methods are async, so Ray runs up to `max_concurrency` episodes at once on the actor's event
    loop; each takes an idle `EnvWorker` from the pool (or makes one) and returns it afterwards.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any],
        policy: PolicyFactory,
        limits: RolloutLimits,
        seed: int | None,
        registration: Registration | None = None,
    ) -> None:
        if registration is not None:  # registered in the driver only: this process never saw it
            registry.register(
                env_id,
                registration.entry_point,
                max_turns=registration.max_turns,
                kwargs=registration.kwargs,
                override=True,
            )
        self.env_id, self.env_kwargs, self.limits, self.seed = env_id, env_kwargs, limits, seed
        self.policy = policy()
        self.idle: list[EnvWorker] = []
        self.workers: list[EnvWorker] = []

    async def play(self, ref: EpisodeRef, budget_ends_at: float | None) -> Episode:
        """Play the episode `ref` names; `budget_ends_at` is the batch's end in `time.time()` seconds.

        The end is absolute, not "seconds left", so an episode re-run after a restart keeps the
        batch's deadline instead of getting a fresh budget.
        """
        loop = asyncio.get_running_loop()
        deadline = None if budget_ends_at is None else loop.time() + (budget_ends_at - time.time())
        if self.idle:
            worker = self.idle.pop()
        else:
            worker = EnvWorker(self.env_id, self.env_kwargs, self.policy, self.limits, seed=self.seed)
            self.workers.append(worker)
        try:
            return await worker.play(ref, budget_deadline=deadline)
        finally:
            self.idle.append(worker)

    async def close(self) -> None:
        """Close every environment (and so its sandbox); the driver calls this before killing the actor."""
        await asyncio.gather(*(worker.close() for worker in self.workers))
        await self.policy.close()


async def run_batch_ray(
    env_id: str,
    policy: str | PolicyFactory,
    *,
    episodes: Iterable[int | EpisodeRef],
    seed: int | None,
    limits: RolloutLimits,
    env_kwargs: dict[str, Any],
    on_episode: Callable[[Episode], None] | None,
    address: str | None = None,
    workers: int | None = None,
) -> BatchResult:
    """Play the episodes `episodes` names on Ray actors; the result is what `run_batch` would return.

    `policy` is a picklable factory each actor calls once, or a `load_policy` spec string.
    `address` is where Ray runs (`auto`, `ray://host:port`); without it the current Ray connection is
    used, or a local Ray instance with one CPU per core is started (and shut down at the end).
    `workers` is the number of actors: by default one per CPU of the cluster, at most one per episode
    slot. The envs and the policy must be importable on the Ray workers (installed, or on PYTHONPATH).
    """
    import ray

    refs = as_refs(episodes, seed)
    factory = functools.partial(load_policy, policy) if isinstance(policy, str) else policy
    started = time.perf_counter()
    slots = min(limits.concurrency, max(len(refs), 1))
    if limits.backend_concurrency:  # every episode uses the same env, hence the same sandbox backend
        backend = registry.spec(env_id).provenance.default_sandbox or "none"
        slots = min(slots, limits.backend_concurrency.get(backend, slots))
    started_ray = not ray.is_initialized()
    if started_ray:  # blocks for a few seconds, before any episode is in flight
        init_ray(address)
    actors: list[Actor] = []
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
        count = max(1, min(workers or cpus, slots))
        actor_class = ray.remote(EpisodeWorker).options(
            max_restarts=ACTOR_RESTARTS,
            max_task_retries=ACTOR_RESTARTS,  # Ray re-runs the dead actor's in-flight episodes
            max_concurrency=-(-slots // count),
            scheduling_strategy="SPREAD",
        )
        sent = driver_registration(env_id)
        actors = [actor_class.remote(env_id, env_kwargs, factory, limits, seed, sent) for _ in range(count)]
        return await _dispatch(
            actors,
            refs,
            slots=slots,
            limits=limits,
            on_episode=on_episode,
            started=started,
            env_id=env_id,
        )
    finally:
        await _close_actors(actors)
        if started_ray:
            ray.shutdown()


def driver_registration(env_id: str) -> Registration | None:
    """The registration to send to the actors: one made by `register()` with a class or function in
    this process (a plugin's entry point, a "module:attr" string, each actor resolves itself, as it
    does an id only the actors' own plugins know)."""
    try:
        registration = registry.resolve(env_id)
    except UnknownEnvError:
        return None
    if isinstance(registration.entry_point, str) or registration.package is not None:
        return None
    return registration


async def _dispatch(
    actors: list[Actor],
    refs: list[EpisodeRef],
    *,
    slots: int,
    limits: RolloutLimits,
    on_episode: Callable[[Episode], None] | None,
    started: float,
    env_id: str,
) -> BatchResult:
    """Keep `slots` episodes in flight, slot i on actor i mod len(actors), until none is left to start."""
    from ray.exceptions import RayActorError

    pending = deque(refs)
    done: list[Episode] = []
    failures: list[Exception] = []
    budget = limits.time_budget
    ends_at = None if budget is None else time.time() + budget
    stop_at = None if budget is None else time.monotonic() + budget

    async def slot(actor: Actor) -> None:
        while pending and not failures and (stop_at is None or time.monotonic() < stop_at):
            ref = pending.popleft()
            try:
                episode: Episode = await actor.play.remote(ref, ends_at)
            except RayActorError as exc:
                failures.append(
                    RayWorkerLost(
                        f"a Ray worker playing {env_id} died {ACTOR_RESTARTS + 1} times or could not start, "
                        f"last while playing episode {ref.index}: {exc}\nFix the cause (memory? a crashing "
                        "sandbox? the env or the policy not installed on the Ray workers?), then run again "
                        "with --resume: the episodes finished so far are kept"
                    )
                )
                return
            except Exception as exc:  # the env or runner raised on the worker, as it would locally
                failures.append(exc)
                return
            done.append(episode)
            if on_episode is not None:
                on_episode(episode)

    # After a failure the other slots stop taking episodes but finish (and hand on) those in flight.
    async with asyncio.TaskGroup() as group:
        for number in range(slots):
            group.create_task(slot(actors[number % len(actors)]))
    if failures:
        raise failures[0]
    return BatchResult(
        episodes=sorted(done, key=lambda e: e.episode_id),
        not_started=sorted(ref.index for ref in pending),
        wall_seconds=time.perf_counter() - started,
    )


async def _close_actors(actors: list[Actor]) -> None:
    """Let every live actor close its environments, then end it; a dead one has nothing left to close."""
    import ray

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await asyncio.gather(*(actor.close.remote() for actor in actors), return_exceptions=True)
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
