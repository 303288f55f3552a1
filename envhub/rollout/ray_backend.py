"""The Ray backend of `envhub rollout`: the same batch, its episodes spread over Ray actors.

A `RayEpisodePool` holds the actors. Each keeps its environments in `EnvWorker`s, made once and reset
between episodes exactly as in the asyncio runner, and builds the policy by calling a picklable
factory (a live policy may hold clients or GPU weights that do not pickle;
`functools.partial(load_policy, "oracle")` is one). The driver hands out episode references, keeps
at most `limits.concurrency` in flight, and calls `on_episode` as each episode comes back, so the
store, resume and the progress bar work unchanged.

The pool outlives a batch: a caller that plays batch after batch (the trainer, once per step) makes
one, passes it as `rollout(backend=pool)` and closes it at the end, so actors, envs and policies start
once, not per batch. `run_batch_ray` without a pool makes one for its batch (the command line's run).

An env registered with `envhub.register` in the driver only (a script's, a test's, a training run's)
is sent to the actors and registered there too, since their processes never ran that call; plugin
envs are found by the actors' own registry, and a remote id (`ws://host:port/ID`) is played from the
actors against its server, with the driver's `ENVHUB_SERVE_TOKEN`.

A dead actor (its process killed, its node lost) is restarted by Ray, which re-runs the episodes it
had in flight; the driver sees each episode once. Ray is imported only when this backend runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.util
import json
import logging
import os
import time
import uuid
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

from envhub.policies import Policy, load_policy
from envhub.records import Episode
from envhub.registration import Registration, UnknownEnvError, is_external, registry
from envhub.rollout.runner import BatchResult, EnvWorker, EpisodeRef, RolloutLimits, as_refs

PolicyFactory = Callable[[], Policy]
"""Builds the policy where the episodes run; it must pickle to reach a Ray worker."""

Actor = Any
"""A Ray handle to an `EpisodeWorker` actor (Ray's annotations of actor calls do not type-check)."""

T = TypeVar("T")

ACTOR_RESTARTS = 3
"""How often Ray restarts one dead actor (re-running its in-flight episodes) before the batch stops."""

CLOSE_TIMEOUT = 30.0
"""Seconds the actors get to close their environments when a pool closes before being killed."""

KEPT = 4
"""Policies (one per factory) and kinds of env (one per id and options) an actor keeps between
batches; the least recently used one that no episode is using is closed first."""


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


@dataclass(frozen=True)
class _Batch:
    """What every episode of one batch shares; an actor fetches it once, on the batch's first episode."""

    env_id: str
    env_kwargs: dict[str, Any]
    registration: Registration | None
    """The driver's own `register()` of the env, which the actors' processes never ran."""
    env_key: str
    """Names the env and its options: envs made for it serve every later batch with the same key."""
    policy: PolicyFactory
    policy_key: str
    """Names the factory: its policy serves every later batch with the same key."""
    limits: RolloutLimits
    serve_token: str | None
    """The driver's `envhub serve` token for a remote id (an actor's process may not inherit it)."""


class EpisodeWorker:
    """A Ray actor playing the episodes it is sent, of any env, keeping envs and policies between them.

    Its methods are async, so Ray runs several episodes at once on the actor's event loop; each takes
    an idle `EnvWorker` of its env from the actor's pool (or makes one) and returns it afterwards.
    """

    def __init__(self) -> None:
        self.incarnation = uuid.uuid4().hex
        """Changes when Ray restarts the actor: the driver replaces a restarted actor between batches."""
        self.batches: OrderedDict[str, _Batch] = OrderedDict()
        self.policies: OrderedDict[str, Policy] = OrderedDict()
        self.idle: OrderedDict[str, list[EnvWorker]] = OrderedDict()
        """Idle env workers by env key, least recently used first."""
        self.playing: Counter[str] = Counter()
        """Episodes in flight by policy key and by env key: what is in use is never closed."""
        self.workers: set[EnvWorker] = set()
        """Every env worker, idle or playing: `close()` closes them all."""

    async def play(
        self, ref: EpisodeRef, budget_ends_at: float | None, batch_key: str, batch: list[Any]
    ) -> tuple[Episode, str]:
        """Play the episode `ref` names; returns it and this actor's incarnation.

        `batch` is `[ObjectRef of a _Batch]`, in a list so that Ray does not fetch it for every episode.
        `budget_ends_at` is the batch's end in `time.time()` seconds: absolute, not "seconds left", so
        an episode re-run after a restart keeps the batch's deadline instead of getting a fresh budget.
        """
        loop = asyncio.get_running_loop()
        deadline = None if budget_ends_at is None else loop.time() + (budget_ends_at - time.time())
        spec = await self._batch(batch_key, batch[0])
        policy = _take(self.policies, spec.policy_key)
        self.policies[spec.policy_key] = policy = spec.policy() if policy is None else policy
        idle = _take(self.idle, spec.env_key)
        self.idle[spec.env_key] = idle = [] if idle is None else idle
        if idle:
            worker = idle.pop()
            worker.policy, worker.limits = policy, spec.limits  # this batch's, for one kept from another
        else:
            worker = EnvWorker(spec.env_id, spec.env_kwargs, policy, spec.limits, seed=None)
            self.workers.add(worker)
        self.playing.update((spec.policy_key, spec.env_key))
        try:
            episode = await worker.play(ref, budget_deadline=deadline)
        finally:
            self.playing.subtract((spec.policy_key, spec.env_key))
            self.idle[spec.env_key].append(worker)
        await self._forget()
        return episode, self.incarnation

    async def _batch(self, key: str, batch: Any) -> _Batch:
        """The batch `key` names: fetched (and its env registered here) on its first episode."""
        spec = _take(self.batches, key)
        if spec is None:
            spec = await batch
            assert isinstance(spec, _Batch)
            if spec.registration is not None:  # registered in the driver only: this process never saw it
                registration = spec.registration
                registry.register(
                    spec.env_id,
                    registration.entry_point,
                    max_turns=registration.max_turns,
                    kwargs=registration.kwargs,
                    override=True,
                )
            if spec.serve_token is not None:
                from envhub.serve.client import TOKEN_ENV  # a remote id: the client is needed anyway

                os.environ[TOKEN_ENV] = spec.serve_token
        self.batches[key] = spec
        while len(self.batches) > KEPT:
            self.batches.popitem(last=False)
        return spec

    async def _forget(self) -> None:
        """Close the least recently used policies and idle envs beyond `KEPT` that nothing is using."""
        for policy in _unused(self.policies, self.playing):
            await policy.close()
        for workers in _unused(self.idle, self.playing):
            self.workers.difference_update(workers)
            await asyncio.gather(*(worker.close() for worker in workers))

    async def close(self) -> None:
        """Close every environment (and so its sandbox) and policy; the driver calls this before killing
        the actor."""
        await asyncio.gather(*(worker.close() for worker in self.workers))
        await asyncio.gather(*(policy.close() for policy in self.policies.values()))


def _take(kept: OrderedDict[str, T], key: str) -> T | None:
    """Take `key`'s entry out of `kept` (the caller puts it back last: the most recently used)."""
    return kept.pop(key, None)


def _unused(kept: OrderedDict[str, T], playing: Counter[str]) -> list[T]:
    """Remove and return the least recently used entries beyond `KEPT` that no episode is using."""
    idle = [key for key in kept if not playing[key]]
    return [kept.pop(key) for key in idle[: max(0, len(kept) - KEPT)]]


@dataclass
class _PoolState:
    """The pool's actors and what the driver knows of them (apart from the pool, for its finalizer)."""

    actors: list[Actor] = field(default_factory=list)
    incarnations: dict[Actor, str] = field(default_factory=dict)
    """Each actor's incarnation when first heard from: a different one later means Ray restarted it."""
    restarted: set[Actor] = field(default_factory=set)
    batches: int = 0
    """Batches in flight: restarted actors are replaced only when none is."""
    started_ray: bool = False
    closed: bool = False


class RayEpisodePool:
    """Episode actors kept across batches: pass it as `rollout(..., backend=pool)` call after call.

    The actors keep their environments (reset between episodes, as the asyncio runner's are; one kind
    per env id and options) and the policies built from the factories they were given. A policy is
    built once per actor for each factory (an equal one, such as a `functools.partial` of the same
    function and arguments, counts as the same), so a policy whose weights change between batches
    must reach them itself, as the trainer's `RemotePlayer` does by sending each turn to the engine
    actors the trainer syncs.

    The pool joins the current Ray connection, or starts Ray (locally, or at `address`) when its first
    actor starts and shuts it down on `close()`. Use it as a context manager or call `close()`. An
    actor Ray had to restart is replaced after its batch, so each batch has `ACTOR_RESTARTS` restarts.

        with RayEpisodePool() as pool:
            for step in range(steps):
                await rollout(env_id, factory, episodes=refs, backend=pool)
    """

    def __init__(self, address: str | None = None) -> None:
        self.address = address
        self._state = _PoolState()
        self._factories: OrderedDict[Hashable, tuple[str, PolicyFactory]] = OrderedDict()
        self._finalizer = weakref.finalize(self, _close_pool, self._state)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close every actor's environments and policies, end the actors, and Ray if the pool started it.
        Safe to call twice."""
        self._finalizer()

    def start(self, workers: int) -> None:
        """Start actors (and Ray, if it is not running) until there are `workers`, without waiting for
        them: a caller that knows its first batch is coming starts them while it prepares the rest."""
        ray = self._ray()
        actor_class = ray.remote(EpisodeWorker).options(
            max_restarts=ACTOR_RESTARTS,
            max_task_retries=ACTOR_RESTARTS,  # Ray re-runs the dead actor's in-flight episodes
            scheduling_strategy="SPREAD",
        )
        while len(self._state.actors) < workers:
            self._state.actors.append(actor_class.remote())

    def _ray(self) -> Any:
        """The `ray` module, connected: to the current connection, or to a Ray instance the pool starts."""
        import ray

        if self._state.closed:
            raise RuntimeError("this RayEpisodePool is closed: make a new one for more batches")
        if not ray.is_initialized():  # blocks for a few seconds, before any episode is in flight
            init_ray(self.address)
            self._state.started_ray = True
        return ray

    async def play(
        self,
        env_id: str,
        policy: PolicyFactory,
        refs: list[EpisodeRef],
        *,
        limits: RolloutLimits,
        env_kwargs: dict[str, Any],
        on_episode: Callable[[Episode], None] | None,
        workers: int | None = None,
    ) -> BatchResult:
        """Play the episodes `refs` names on the pool's actors; `run_batch_ray` says more."""
        started = time.perf_counter()
        slots = min(limits.concurrency, max(len(refs), 1))
        if limits.backend_concurrency:  # every episode uses the same env, hence the same sandbox backend
            backend = registry.spec(env_id).provenance.default_sandbox or "none"
            slots = min(slots, limits.backend_concurrency.get(backend, slots))
        ray = self._ray()
        cpus = int(ray.cluster_resources().get("CPU", 1))
        count = max(1, min(workers or cpus, slots))
        self.start(count)
        batch = self._batch(env_id, env_kwargs, policy, limits)
        state = self._state
        state.batches += 1
        try:
            return await _dispatch(
                state,
                refs,
                batch=(uuid.uuid4().hex, [ray.put(batch)]),
                actors=state.actors[:count],
                slots=slots,
                budget=limits.time_budget,
                on_episode=on_episode,
                started=started,
                env_id=env_id,
            )
        finally:
            state.batches -= 1
            if not state.batches:
                _replace_restarted(state)

    def _batch(
        self, env_id: str, env_kwargs: dict[str, Any], policy: PolicyFactory, limits: RolloutLimits
    ) -> _Batch:
        sent = driver_registration(env_id)
        options = json.dumps(env_kwargs, sort_keys=True, default=repr)
        entry_point = "" if sent is None else f"{sent.entry_point!r}@{id(sent.entry_point)}"
        return _Batch(
            env_id=env_id,
            env_kwargs=env_kwargs,
            registration=sent,
            env_key=f"{env_id} {options} {entry_point}",
            policy=policy,
            policy_key=self._policy_key(policy),
            limits=limits,
            serve_token=_serve_token(env_id),
        )

    def _policy_key(self, factory: PolicyFactory) -> str:
        """The key the actors know `factory`'s policy by: the same for an equal factory."""
        key = _factory_key(factory)
        token, kept = self._factories.pop(key, (uuid.uuid4().hex, factory))
        self._factories[key] = (token, kept)  # `kept` keeps an id-keyed factory alive with its id
        while len(self._factories) > KEPT:  # the actors forget old policies too
            self._factories.popitem(last=False)
        return token


def _factory_key(factory: PolicyFactory) -> Hashable:
    """What tells factories apart: a `functools.partial` by its function and arguments, another
    factory by its own equality (a frozen dataclass by its fields), an unhashable one by identity."""
    key: Hashable = factory
    if isinstance(factory, functools.partial):
        key = (factory.func, factory.args, tuple(sorted(factory.keywords.items())))
    try:
        hash(key)
    except TypeError:
        return ("id", id(factory))  # kept alive beside its token, so the id cannot be reused meanwhile
    return key


def _serve_token(env_id: str) -> str | None:
    """The driver's `envhub serve` token, for a remote id."""
    if not is_external(env_id):
        return None
    from envhub.serve.client import TOKEN_ENV  # a remote id needs the client anyway

    return os.environ.get(TOKEN_ENV)


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
    pool: RayEpisodePool | None = None,
) -> BatchResult:
    """Play the episodes `episodes` names on Ray actors; the result is what `run_batch` would return.

    `policy` is a picklable factory each actor calls once, or a `load_policy` spec string.
    `pool` keeps the actors for later batches; without one, actors are started for this batch and
    ended after it. `address` is where such a one-batch pool runs Ray (`auto`, `ray://host:port`);
    without it the current Ray connection is used, or a local Ray instance with one CPU per core is
    started (and shut down at the end). `workers` is the number of actors: by default one per CPU of
    the cluster, at most one per episode slot. The envs and the policy must be importable on the Ray
    workers (installed, or on PYTHONPATH).
    """
    refs = as_refs(episodes, seed)
    factory = functools.partial(load_policy, policy) if isinstance(policy, str) else policy
    options: dict[str, Any] = {
        "limits": limits,
        "env_kwargs": env_kwargs,
        "on_episode": on_episode,
        "workers": workers,
    }
    if pool is not None:
        return await pool.play(env_id, factory, refs, **options)
    with RayEpisodePool(address) as once:
        return await once.play(env_id, factory, refs, **options)


def driver_registration(env_id: str) -> Registration | None:
    """The registration to send to the actors: one made by `register()` with a class or function in
    this process (a plugin's entry point, a "module:attr" string, each actor resolves itself, as it
    does an id only the actors' own plugins know; a URL or a format id needs no registration)."""
    if is_external(env_id):
        return None
    try:
        registration = registry.resolve(env_id)
    except UnknownEnvError:
        return None
    if isinstance(registration.entry_point, str) or registration.package is not None:
        return None
    return registration


async def _dispatch(
    state: _PoolState,
    refs: list[EpisodeRef],
    *,
    batch: tuple[str, list[Any]],
    actors: list[Actor],
    slots: int,
    budget: float | None,
    on_episode: Callable[[Episode], None] | None,
    started: float,
    env_id: str,
) -> BatchResult:
    """Keep `slots` episodes in flight, slot i on `actors[i % len(actors)]`, until none is left."""
    import ray
    from ray.exceptions import RayActorError

    pending = deque(refs)
    done: list[Episode] = []
    failures: list[Exception] = []
    ends_at = None if budget is None else time.time() + budget
    stop_at = None if budget is None else time.monotonic() + budget

    async def slot(actor: Actor) -> None:
        while pending and not failures and (stop_at is None or time.monotonic() < stop_at):
            ref = pending.popleft()
            running = actor.play.remote(ref, ends_at, *batch)
            try:
                episode, incarnation = await running
            except RayActorError as exc:
                _forget_actor(state, actor)
                failures.append(
                    RayWorkerLost(
                        f"a Ray worker playing {env_id} died {ACTOR_RESTARTS + 1} times or could not start, "
                        f"last while playing episode {ref.index}: {exc}\nFix the cause (memory? a crashing "
                        "sandbox? the env or the policy not installed on the Ray workers?), then run again "
                        "with --resume: the episodes finished so far are kept"
                    )
                )
                return
            except asyncio.CancelledError:  # interrupted: the actor stops the episode too
                with contextlib.suppress(Exception):
                    ray.cancel(running)
                raise
            except Exception as exc:  # the env or runner raised on the worker, as it would locally
                failures.append(exc)
                return
            if state.incarnations.setdefault(actor, incarnation) != incarnation:
                state.restarted.add(actor)
            done.append(episode)
            if on_episode is not None:
                on_episode(episode)

    # After a failure the other slots stop taking episodes but finish (and hand on) those in flight.
    async with asyncio.TaskGroup() as tasks:
        for number in range(slots):
            tasks.create_task(slot(actors[number % len(actors)]))
    if failures:
        raise failures[0]
    return BatchResult(
        episodes=sorted(done, key=lambda e: e.episode_id),
        not_started=sorted(ref.index for ref in pending),
        wall_seconds=time.perf_counter() - started,
    )


def _forget_actor(state: _PoolState, actor: Actor) -> None:
    """Forget an actor (dead for good, or about to be ended); the next batch starts a fresh one."""
    if actor in state.actors:
        state.actors.remove(actor)
    state.incarnations.pop(actor, None)
    state.restarted.discard(actor)


def _replace_restarted(state: _PoolState) -> None:
    """End the actors Ray restarted, so the next batch starts fresh ones with every restart left."""
    retired = [actor for actor in state.actors if actor in state.restarted]
    for actor in retired:
        _forget_actor(state, actor)
    _end_actors(retired)


def _end_actors(actors: list[Actor]) -> None:
    """Let every live actor close its environments, then end it; a dead one has nothing left to close."""
    import ray

    if not actors or not ray.is_initialized():
        return
    closing = []
    for actor in actors:
        with contextlib.suppress(Exception):
            closing.append(actor.close.remote())
    with contextlib.suppress(Exception):
        ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT)
    for actor in actors:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)


def _close_pool(state: _PoolState) -> None:
    """A pool's close (and finalizer): end its actors, then Ray if the pool started it."""
    state.closed = True
    actors, state.actors = state.actors, []
    _end_actors(actors)
    if state.started_ray:
        import ray

        with contextlib.suppress(Exception):
            ray.shutdown()
