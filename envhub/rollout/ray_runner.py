"""The Ray backend of `envhub rollout`: the same batch, its episodes spread over Ray actors.

A `RayEpisodePool` holds the actors. Each keeps its environments in `EnvWorker`s, made once and reset
between episodes exactly as in the asyncio runner, and builds the policy by calling a picklable
factory (a live policy may hold clients or GPU weights that do not pickle;
`functools.partial(load_policy, "oracle")` is one). The driver hands out episode references, keeps
at most `limits.concurrency` in flight, and calls `on_episode` as each episode comes back, so the
store, resume and the progress bar work unchanged.

The pool outlives a batch: a caller that plays batch after batch (the trainer, once per step) makes
one, passes it as `rollout(runs_on=pool)` and closes it at the end, so actors, envs and policies start
once, not per batch. `run_batch_ray` without a pool makes one for its batch (the command line's run).

An env registered with `envhub.register` in the driver only (a script's, a test's, a training run's)
is sent to the actors and registered there too, since their processes never ran that call; plugin
envs are found by the actors' own registry, and a remote id (`ws://host:port/ID`) is played from the
actors against its server, with the driver's `ENVHUB_SERVE_TOKEN`.

On a cluster, episodes go where their env can run: an env whose default sandbox is `local` or
`docker` has its actors ask for one unit of the custom resource `sandbox`, a `browser` env for
`browser` (`SANDBOX_RESOURCES`), when the cluster advertises that resource (`ray start --resources
'{"sandbox": 8}'`); on a cluster without it (a local Ray) they go anywhere. `RayEpisodePool(resources=
...)` overrides this for every env. Each stored episode records the Ray node id that played it
(`Episode.node`). An actor plays several episodes per call (`EPISODES_PER_CALL`) and returns them
together, so the driver makes one call and one transfer per few episodes, not per episode.

A dead actor (its process killed, its node lost) is restarted by Ray, on a node that still has the
resource, which re-runs the episodes it had in flight; the driver sees each episode once. Ray is
imported only when this backend runs.
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
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

from envhub.policies import Policy, load_policy
from envhub.records import Episode
from envhub.registration import Registration, UnknownEnvError, is_external, registry, sandbox_kind
from envhub.rollout.runner import (
    BatchResult,
    EnvWorker,
    EpisodeRef,
    RolloutLimits,
    Unit,
    as_refs,
    drive,
    units_of,
)

log = logging.getLogger(__name__)

PolicyFactory = Callable[[], Policy]
"""Builds the policy where the episodes run; it must pickle to reach a Ray worker."""

Actor = Any
"""A Ray handle to an `EpisodeWorker` actor (Ray's annotations of actor calls do not type-check)."""

T = TypeVar("T")

ACTOR_RESTARTS = 3
"""How often Ray restarts one dead actor (re-running its in-flight episodes) before the batch stops."""

CLOSE_TIMEOUT = 30.0
"""Seconds the actors get to close their environments when a pool closes before being killed."""

EPISODES_PER_CALL = 8
"""The most episodes one call to an actor plays (together) and returns: fewer calls and transfers, at
the cost of waiting for the call's slowest episode before its slots take more."""

SANDBOX_RESOURCES = {"local": "sandbox", "docker": "sandbox", "browser": "browser"}
"""The custom Ray resource an env's actors ask for (one unit each), by the env's default sandbox. An
env without one (or on E2B, whose sandboxes run elsewhere) asks for none and runs on any node."""

KEPT = 4
"""Policies (one per factory) and kinds of env (one per id and options) an actor keeps between
batches; the least recently used one that no episode is using is closed first."""


class RayWorkerLost(RuntimeError):
    """An actor died more often than Ray may restart it, or could not start: retrying more is pointless."""


def ray_address(runs_on: str) -> str | None:
    """The Ray address a `runs_on` (`--backend`) value names (None: a local instance), once Ray is known
    installed."""
    if runs_on not in ("ray", "auto") and not runs_on.startswith("ray://"):
        raise ValueError(f"unknown backend {runs_on!r}; expected local, ray, auto or ray://HOST:PORT")
    if importlib.util.find_spec("ray") is None:
        raise ModuleNotFoundError(f"the {runs_on!r} backend needs Ray: pip install 'envhub-core[ray]'")
    return None if runs_on == "ray" else runs_on


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
        for attempt in range(CLIENT_ATTEMPTS):
            try:
                ray.init(address=address, logging_level=logging.WARNING)
                return
            except ConnectionError as exc:  # Ray Client raises ConnectionAbortedError, a ConnectionError
                if "Initialization failure from server" not in str(exc) or attempt == CLIENT_ATTEMPTS - 1:
                    raise
                log.warning("Ray Client at %s failed to start its server for us (%s); retrying", address, exc)
                ray.shutdown()
                time.sleep(2.0 * (attempt + 1))


CLIENT_ATTEMPTS = 3
"""Ray Client's proxier starts a server per client, and under load it has lost one at birth (psutil's
ZombieProcess inside `proxier.start_specific_server`): `Initialization failure from server`, on a
healthy cluster. Joining again is what a user would do; anything else is raised at once."""


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
    fork_at: int | None = None
    """A fork batch: each call is one group (`EnvWorker.play_unit`), its prefix played to this turn."""


def _deadline(budget_ends_at: float | None) -> float | None:
    """The batch's end, given in `time.time()` seconds, on this event loop's clock."""
    if budget_ends_at is None:
        return None
    return asyncio.get_running_loop().time() + (budget_ends_at - time.time())


class EpisodeWorker:
    """A Ray actor playing the episodes it is sent, of any env, keeping envs and policies between them.

    Its methods are async, so Ray runs several episodes at once on the actor's event loop; each takes
    an idle `EnvWorker` of its env from the actor's pool (or makes one) and returns it afterwards.
    """

    def __init__(self) -> None:
        import ray

        self.incarnation = uuid.uuid4().hex
        """Changes when Ray restarts the actor: the driver replaces a restarted actor between batches."""
        self.node: str | None = ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
        """The Ray node this actor runs on, which every episode it plays records."""
        self.batches: OrderedDict[str, _Batch] = OrderedDict()
        self.policies: OrderedDict[str, Policy] = OrderedDict()
        self.idle: OrderedDict[str, list[EnvWorker]] = OrderedDict()
        """Idle env workers by env key, least recently used first."""
        self.playing: Counter[str] = Counter()
        """Episodes in flight by policy key and by env key: what is in use is never closed."""
        self.workers: set[EnvWorker] = set()
        """Every env worker, idle or playing: `close()` closes them all."""
        self.counts: Counter[str] = Counter()
        """Calls, episodes and envs made so far: `stats()` reports them."""

    async def play_many(
        self, refs: list[EpisodeRef], budget_ends_at: float | None, batch_key: str, batch: list[Any]
    ) -> tuple[list[Episode], str]:
        """Play the episodes `refs` names at once; returns them together, and this actor's incarnation.

        An exception of one episode (the env or runner failed, not an episode error, which the episode
        records) is raised once all have finished: the batch stops, and its stored episodes are kept.
        """
        self.counts["calls"] += 1
        spec = await self._batch(batch_key, batch[0])
        if spec.fork_at is not None:  # the call is one fork group: its children need its prefix's env
            async with self._env_worker(spec) as worker:
                group = await worker.play_unit(
                    refs, fork_at=spec.fork_at, budget_deadline=_deadline(budget_ends_at)
                )
            self.counts["episodes"] += len(group)
            return [episode.model_copy(update={"node": self.node}) for episode in group], self.incarnation
        played = await asyncio.gather(
            *(self.play(ref, budget_ends_at, batch_key, batch) for ref in refs), return_exceptions=True
        )
        for result in played:
            if isinstance(result, BaseException):
                raise result
        return [episode for episode in played if isinstance(episode, Episode)], self.incarnation

    async def play(
        self, ref: EpisodeRef, budget_ends_at: float | None, batch_key: str, batch: list[Any]
    ) -> Episode:
        """Play the episode `ref` names, recording this actor's node in it.

        `batch` is `[ObjectRef of a _Batch]`, in a list so that Ray does not fetch it for every episode.
        `budget_ends_at` is the batch's end in `time.time()` seconds: absolute, not "seconds left", so
        an episode re-run after a restart keeps the batch's deadline instead of getting a fresh budget.
        """
        spec = await self._batch(batch_key, batch[0])
        async with self._env_worker(spec) as worker:
            episode = await worker.play(ref, budget_deadline=_deadline(budget_ends_at))
        self.counts["episodes"] += 1
        return episode.model_copy(update={"node": self.node})

    @contextlib.asynccontextmanager
    async def _env_worker(self, spec: _Batch) -> AsyncIterator[EnvWorker]:
        """An idle env worker of the batch's env (or a new one) with its policy, returned afterwards;
        then policies and envs beyond `KEPT` that nothing uses are closed."""
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
            self.counts["envs"] += 1
        self.playing.update((spec.policy_key, spec.env_key))
        try:
            yield worker
        finally:
            self.playing.subtract((spec.policy_key, spec.env_key))
            self.idle[spec.env_key].append(worker)
        await self._forget()

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

    def stats(self) -> dict[str, Any]:
        """Where this actor runs (process, node) and what it did: calls, episodes and env workers made."""
        return {"pid": os.getpid(), "node": self.node, **self.counts}

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

    actors: dict[str, list[Actor]] = field(default_factory=dict)
    """The actors by the resources they asked for (`_resources_key`): each group serves its own envs."""
    incarnations: dict[Actor, str] = field(default_factory=dict)
    """Each actor's incarnation when first heard from: a different one later means Ray restarted it."""
    restarted: set[Actor] = field(default_factory=set)
    batches: int = 0
    """Batches in flight: restarted actors are replaced only when none is."""
    started_ray: bool = False
    closed: bool = False


class RayEpisodePool:
    """Episode actors kept across batches: pass it as `rollout(..., runs_on=pool)` call after call.

    The actors keep their environments (reset between episodes, as the asyncio runner's are; one kind
    per env id and options) and the policies built from the factories they were given. A policy is
    built once per actor for each factory (an equal one, such as a `functools.partial` of the same
    function and arguments, counts as the same), so a policy whose weights change between batches
    must reach them itself, as the trainer's `RemotePlayer` does by sending each turn to the engine
    actors the trainer syncs.

    The pool joins the current Ray connection, or starts Ray (locally, or at `address`) when its first
    actor starts and shuts it down on `close()`. Use it as a context manager or call `close()`. An
    actor Ray had to restart is replaced after its batch, so each batch has `ACTOR_RESTARTS` restarts.

    On a cluster, each env's actors ask for the custom resource of its sandbox (`SANDBOX_RESOURCES`)
    when the cluster has it; `resources` (e.g. `{"sandbox": 1}`) is what every actor asks for instead.

        with RayEpisodePool() as pool:
            for step in range(steps):
                await rollout(env_id, factory, episodes=refs, runs_on=pool)
    """

    def __init__(self, address: str | None = None, *, resources: dict[str, float] | None = None) -> None:
        self.address = address
        self.resources = resources
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

    def start(
        self, workers: int, env_id: str | None = None, env_kwargs: Mapping[str, Any] | None = None
    ) -> list[Actor]:
        """Start actors for `env_id`'s episodes (and Ray, if it is not running) until there are `workers`,
        without waiting for them: a caller that knows its first batch is coming starts them while it
        prepares the rest. Returns that env's actors."""
        ray = self._ray()
        resources = self.resources_for(env_id, env_kwargs)
        actors = self._state.actors.setdefault(_resources_key(resources), [])
        placement: dict[str, Any] = {"resources": resources, "num_cpus": 0} if resources else {}
        actor_class = ray.remote(EpisodeWorker).options(
            max_restarts=ACTOR_RESTARTS,
            # Ray re-runs the dead actor's in-flight episodes, however often: a lost node refuses calls
            # until Ray declares it dead, which spent a bounded number of retries before the restart.
            # The actor's restarts bound the failures; past them every call fails at once.
            max_task_retries=-1,
            scheduling_strategy="SPREAD",
            **placement,
        )
        while len(actors) < workers:
            actors.append(actor_class.remote())
        return actors[:workers]

    def stats(self) -> list[dict[str, Any]]:
        """Each live actor's `EpisodeWorker.stats()`: where it runs, how many calls and episodes it
        played and how many env workers it made (env reuse and batched calls, observed)."""
        ray = self._ray()
        stats: list[dict[str, Any]] = ray.get([actor.stats.remote() for actor in _every_actor(self._state)])
        return stats

    def resources_for(
        self, env_id: str | None, env_kwargs: Mapping[str, Any] | None = None
    ) -> dict[str, float]:
        """The custom resources each actor playing `env_id` asks for: the pool's `resources`, else the
        one its sandbox needs (`SANDBOX_RESOURCES`; `_sandbox_of`) if the cluster has it, else none."""
        if self.resources is not None:
            return dict(self.resources)
        if env_id is None:
            return {}
        try:
            sandbox = _sandbox_of(env_id, env_kwargs or {})
        except Exception:  # a remote id or an unknown one: the actors' own registry decides
            return {}
        name = SANDBOX_RESOURCES.get(sandbox)
        if name is None or not self._ray().cluster_resources().get(name):
            return {}
        return {name: 1.0}

    def capacity(self, env_id: str | None, env_kwargs: Mapping[str, Any] | None = None) -> int:
        """How many actors for `env_id` the cluster holds: one per CPU of each node that has its resource,
        at most that node's units of it (an actor plays many episodes at once, so more actors than
        cores only add processes), or one per CPU of the cluster for an env that needs no resource."""
        resources = self.resources_for(env_id, env_kwargs)
        ray = self._ray()
        if not resources:
            return max(1, int(ray.cluster_resources().get("CPU", 1)))
        count = 0
        for node in ray.nodes():
            if node.get("Alive"):
                have = node.get("Resources", {})
                units = min(int(have.get(name, 0) // max(need, 1e-9)) for name, need in resources.items())
                count += min(units, max(1, int(have.get("CPU", 1))))
        return max(1, count)

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
        fork_at: int | None = None,
    ) -> BatchResult:
        """Play the episodes `refs` names on the pool's actors; `run_batch_ray` says more."""
        started = time.perf_counter()
        units = units_of(refs, limits, fork_at)
        slots = min(limits.concurrency, max(len(refs), 1))
        if limits.backend_concurrency:  # every episode uses the same env, hence the same sandbox backend
            backend = _sandbox_of(env_id, env_kwargs)
            slots = min(slots, limits.backend_concurrency.get(backend, slots))
        ray = self._ray()
        count = max(1, min(workers or self.capacity(env_id, env_kwargs), slots))
        actors = self.start(count, env_id, env_kwargs)
        batch = self._batch(env_id, env_kwargs, policy, limits, fork_at)
        state = self._state
        state.batches += 1
        try:
            return await drive(
                units,
                _calls(
                    state, actors, (uuid.uuid4().hex, [ray.put(batch)]), slots, len(units), fork_at, env_id
                ),
                time_budget=limits.time_budget,
                on_episode=on_episode,
                started=started,
            )
        finally:
            state.batches -= 1
            if not state.batches:
                _replace_restarted(state)

    def _batch(
        self,
        env_id: str,
        env_kwargs: dict[str, Any],
        policy: PolicyFactory,
        limits: RolloutLimits,
        fork_at: int | None,
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
            fork_at=fork_at,
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


def _sandbox_of(env_id: str, env_kwargs: Mapping[str, Any]) -> str:
    """The sandbox `env_id`'s episodes run in with these options (`envhub.registration.sandbox_kind`)."""
    spec = registry.spec(env_id)
    return sandbox_kind(spec.provenance.default_sandbox, {**spec.env_kwargs, **env_kwargs})


def _serve_token(env_id: str) -> str | None:
    """The driver's `envhub serve` token, for a remote id."""
    if not is_external(env_id):
        return None
    from envhub.serve.client import serve_token  # a remote id needs the client anyway

    return serve_token()


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
    fork_at: int | None = None,
) -> BatchResult:
    """Play the episodes `episodes` names on Ray actors; the result is what `run_batch` would return.

    `policy` is a picklable factory each actor calls once, or a `load_policy` spec string.
    `pool` keeps the actors for later batches; without one, actors are started for this batch and
    ended after it. `address` is where such a one-batch pool runs Ray (`auto`, `ray://host:port`);
    without it the current Ray connection is used, or a local Ray instance with one CPU per core is
    started (and shut down at the end). `workers` is the number of actors: by default one per CPU of
    the cluster, at most one per episode slot. The envs and the policy must be importable on the Ray
    workers (installed, or on PYTHONPATH). `fork_at` plays fork groups (`run_batch(fork_at=)`): each call
    sends an actor one whole group, whose children it forks from the prefix's env.
    """
    refs = as_refs(episodes, seed)
    factory = functools.partial(load_policy, policy) if isinstance(policy, str) else policy
    options: dict[str, Any] = {
        "limits": limits,
        "env_kwargs": env_kwargs,
        "on_episode": on_episode,
        "workers": workers,
        "fork_at": fork_at,
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


def _calls(
    state: _PoolState,
    actors: list[Actor],
    batch: tuple[str, list[Any]],
    slots: int,
    units: int,
    fork_at: int | None,
    env_id: str,
) -> list[_ActorCalls]:
    """The runners that keep `slots` episodes in flight (`slots` groups with `fork_at`) as calls of up to
    `EPISODES_PER_CALL` episodes each (one whole group), call i on `actors[i % len(actors)]`."""
    per_call = 1 if fork_at is not None else max(1, min(EPISODES_PER_CALL, slots // len(actors)))
    calls = max(1, min(slots, units)) if fork_at is not None else -(-slots // per_call)
    return [_ActorCalls(state, actors[i % len(actors)], batch, per_call, env_id) for i in range(calls)]


@dataclass
class _ActorCalls:
    """The Ray backend's `UnitRunner`: one call at a time to one actor, of up to `per_call` units."""

    state: _PoolState
    actor: Actor
    batch: tuple[str, list[Any]]
    per_call: int
    env_id: str

    async def run(self, units: list[Unit], budget_deadline: float | None) -> list[Episode]:
        """Play `units` in one call on the actor; a dead actor's units are reported, not retried here
        (Ray already re-ran them on its restarts)."""
        import ray
        from ray.exceptions import RayActorError

        loop = asyncio.get_running_loop()
        ends_at = None if budget_deadline is None else time.time() + (budget_deadline - loop.time())
        chunk = [ref for unit in units for ref in unit]
        running = self.actor.play_many.remote(chunk, ends_at, *self.batch)
        try:
            episodes, incarnation = await running
        except RayActorError as exc:
            _forget_actor(self.state, self.actor)
            raise RayWorkerLost(
                f"a Ray worker playing {self.env_id} died {ACTOR_RESTARTS + 1} times or could not start, "
                f"last while playing episodes {[ref.index for ref in chunk]}: {exc}\nFix the "
                "cause (memory? a crashing sandbox? the env or the policy not installed on the Ray "
                "workers?), then run again with --resume: the episodes finished so far are kept"
            ) from exc
        except asyncio.CancelledError:  # interrupted: the actor stops the episode too
            with contextlib.suppress(Exception):
                ray.cancel(running)
            raise
        if self.state.incarnations.setdefault(self.actor, incarnation) != incarnation:
            self.state.restarted.add(self.actor)
        result: list[Episode] = episodes
        return result

    async def close(self) -> None:
        return  # the actor outlives the batch: the pool ends it


def _forget_actor(state: _PoolState, actor: Actor) -> None:
    """Forget an actor (dead for good, or about to be ended); the next batch starts a fresh one."""
    for actors in state.actors.values():
        if actor in actors:
            actors.remove(actor)
    state.incarnations.pop(actor, None)
    state.restarted.discard(actor)


def _replace_restarted(state: _PoolState) -> None:
    """End the actors Ray restarted, so the next batch starts fresh ones with every restart left."""
    retired = [actor for actor in _every_actor(state) if actor in state.restarted]
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
    actors = _every_actor(state)
    state.actors = {}
    _end_actors(actors)
    if state.started_ray:
        import ray

        with contextlib.suppress(Exception):
            ray.shutdown()


def _every_actor(state: _PoolState) -> list[Actor]:
    return [actor for actors in state.actors.values() for actor in actors]


def _resources_key(resources: dict[str, float]) -> str:
    """Names a set of resources: actors asking for equal ones form one group."""
    return json.dumps(resources, sort_keys=True)
