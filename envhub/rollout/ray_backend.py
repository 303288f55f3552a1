"""The Ray backend of `envhub rollout`: the same batch, its episodes spread over Ray actors.

Each actor keeps a small pool of `EnvWorker`s, so environments and their sandboxes are made once per
actor and reset between episodes, exactly as in the asyncio runner, and builds the policy by calling
a picklable factory (a live policy may hold clients or GPU weights that do not pickle;
`functools.partial(load_policy, "oracle")` is one). The driver hands out episode references, keeps at
most `limits.concurrency` in flight, and calls `on_episode` as each episode comes back, so the store,
resume and the progress bar work unchanged.

A `RayEpisodePool` keeps those actors for many batches: a caller that plays batch after batch (the
trainer, once per step) makes one, passes it as `rollout(backend=pool)`, and closes it at the end, so
actors, envs and policies are started once, not per batch. `run_batch_ray` without a pool makes one for
the batch and closes it afterwards (the command line's one-shot run).

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
from typing import Any, Self

from envhub.policies import Policy, load_policy
from envhub.records import Episode
from envhub.registration import Registration, UnknownEnvError, is_external, registry
from envhub.rollout.runner import BatchResult, EnvWorker, EpisodeRef, RolloutLimits, as_refs

PolicyFactory = Callable[[], Policy]
"""Builds the policy where the episodes run; it must pickle to reach a Ray worker."""

Actor = Any
"""A Ray handle to an `EpisodeWorker` actor (Ray's annotations of actor calls do not type-check)."""

ACTOR_RESTARTS = 3
"""How often Ray restarts one dead actor (re-running its in-flight episodes) before the batch stops."""

CLOSE_TIMEOUT = 30.0
"""Seconds the actors get to close their environments when a pool closes before being killed."""

KEPT_POLICIES = 4
"""Policies (one per factory) an actor keeps built; the least recently used idle one is closed first."""


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
    """A Ray actor: a pool of environments of one env (and options), playing the episodes it is sent.

    Its methods are async, so Ray runs several episodes at once on the actor's event loop; each takes
    an idle `EnvWorker` from the pool (or makes one) and returns it afterwards. The policy comes with
    each episode as a factory and a token naming it: the first episode of a token builds the policy,
    the next ones reuse it.
    """

    def __init__(
        self, env_id: str, env_kwargs: dict[str, Any], registration: Registration | None = None
    ) -> None:
        if registration is not None:  # registered in the driver only: this process never saw it
            registry.register(
                env_id,
                registration.entry_point,
                max_turns=registration.max_turns,
                kwargs=registration.kwargs,
                override=True,
            )
        self.env_id, self.env_kwargs = env_id, env_kwargs
        self.incarnation = uuid.uuid4().hex
        """Changes when Ray restarts the actor: the driver retires a restarted actor between batches."""
        self.policies: OrderedDict[str, Policy] = OrderedDict()
        self.playing: Counter[str] = Counter()
        self.idle: list[EnvWorker] = []
        self.workers: list[EnvWorker] = []

    async def play(
        self,
        ref: EpisodeRef,
        budget_ends_at: float | None,
        limits: RolloutLimits,
        token: str,
        policy: PolicyFactory,
    ) -> tuple[Episode, str]:
        """Play the episode `ref` names; `budget_ends_at` is the batch's end in `time.time()` seconds.
        Returns the episode and this actor's incarnation.

        The end is absolute, not "seconds left", so an episode re-run after a restart keeps the
        batch's deadline instead of getting a fresh budget.
        """
        loop = asyncio.get_running_loop()
        deadline = None if budget_ends_at is None else loop.time() + (budget_ends_at - time.time())
        player = self._policy(token, policy)
        worker = self.idle.pop() if self.idle else self._new_worker(player, limits)
        worker.policy, worker.limits = player, limits  # this batch's, for a worker kept from another
        self.playing[token] += 1
        try:
            episode = await worker.play(ref, budget_deadline=deadline)
        finally:
            self.playing[token] -= 1
            self.idle.append(worker)
        await self._forget_policies()
        return episode, self.incarnation

    def _new_worker(self, policy: Policy, limits: RolloutLimits) -> EnvWorker:
        worker = EnvWorker(self.env_id, self.env_kwargs, policy, limits, seed=None)
        self.workers.append(worker)
        return worker

    def _policy(self, token: str, factory: PolicyFactory) -> Policy:
        """The policy `token` names, built on its first episode here."""
        policy = self.policies.pop(token, None) or factory()
        self.policies[token] = policy  # last: the most recently used
        return policy

    async def _forget_policies(self) -> None:
        """Close the least recently used policies beyond `KEPT_POLICIES` that no episode is using."""
        idle = [token for token in self.policies if not self.playing[token]]
        for token in idle[: max(0, len(self.policies) - KEPT_POLICIES)]:
            await self.policies.pop(token).close()

    async def close(self) -> None:
        """Close every environment (and so its sandbox) and policy; the driver calls this before killing
        the actor."""
        await asyncio.gather(*(worker.close() for worker in self.workers))
        await asyncio.gather(*(policy.close() for policy in self.policies.values()))


@dataclass
class _Group:
    """The actors of one env (and options) in a pool, and what the driver knows of each."""

    actors: list[Actor] = field(default_factory=list)
    incarnations: dict[Actor, str] = field(default_factory=dict)
    """Each actor's incarnation when first heard from: a different one later means Ray restarted it."""
    restarted: set[Actor] = field(default_factory=set)
    batches: int = 0
    """Batches in flight on the group: restarted actors are retired only when none is."""


@dataclass
class _PoolState:
    """What a pool's finalizer needs (it must not hold the pool itself)."""

    groups: dict[Hashable, _Group] = field(default_factory=dict)
    started_ray: bool = False
    closed: bool = False


class RayEpisodePool:
    """Episode actors kept across batches: pass it as `rollout(..., backend=pool)` call after call.

    Actors are grouped by env id and options; each group's actors keep their environments (reset
    between episodes, as the asyncio runner's are) and the policies built from the factories they were
    given. A policy is built once per actor for each factory (an equal one, such as a
    `functools.partial` of the same function and arguments, counts as the same), so a policy whose
    weights change between batches must reach them itself, as the trainer's `RemotePlayer` does by
    sending each turn to the engine actors the trainer syncs.

    The pool joins the current Ray connection, or starts Ray (locally, or at `address`) on its first
    batch and shuts it down on `close()`. Use it as a context manager or call `close()`; an actor Ray
    had to restart is replaced before the next batch, so each batch gets `ACTOR_RESTARTS` restarts.

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
        """Play the episodes `refs` names on the pool's actors for `env_id`; `run_batch_ray` says more."""
        import ray

        if self._state.closed:
            raise RuntimeError("this RayEpisodePool is closed: make a new one for more batches")
        started = time.perf_counter()
        slots = min(limits.concurrency, max(len(refs), 1))
        if limits.backend_concurrency:  # every episode uses the same env, hence the same sandbox backend
            backend = registry.spec(env_id).provenance.default_sandbox or "none"
            slots = min(slots, limits.backend_concurrency.get(backend, slots))
        if not ray.is_initialized():  # blocks for a few seconds, before any episode is in flight
            init_ray(self.address)
            self._state.started_ray = True
        cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call]
        count = max(1, min(workers or cpus, slots))
        group = self._group(env_id, env_kwargs, count=count)
        call = _Call(self._token(policy), ray.put(policy), limits)
        group.batches += 1
        try:
            return await _dispatch(
                group,
                refs,
                call=call,
                slots=slots,
                count=count,
                budget=limits.time_budget,
                on_episode=on_episode,
                started=started,
                env_id=env_id,
            )
        finally:
            group.batches -= 1
            if not group.batches:
                _retire_restarted(group)

    def _group(self, env_id: str, env_kwargs: dict[str, Any], *, count: int) -> _Group:
        """The group of `env_id` with these options, grown to at least `count` actors."""
        import ray

        sent = driver_registration(env_id)
        options = json.dumps(env_kwargs, sort_keys=True, default=repr)
        key = (env_id, options, None if sent is None else sent.entry_point)
        group = self._state.groups.setdefault(key, _Group())
        if len(group.actors) < count:
            actor_class = ray.remote(EpisodeWorker).options(
                max_restarts=ACTOR_RESTARTS,
                max_task_retries=ACTOR_RESTARTS,  # Ray re-runs the dead actor's in-flight episodes
                scheduling_strategy="SPREAD",
                runtime_env=_serve_token(env_id),
            )
            while len(group.actors) < count:
                group.actors.append(actor_class.remote(env_id, env_kwargs, sent))
        return group

    def _token(self, factory: PolicyFactory) -> str:
        """The token the actors know `factory`'s policy by: the same for an equal factory."""
        key = _factory_key(factory)
        token, kept = self._factories.pop(key, (uuid.uuid4().hex, factory))
        self._factories[key] = (token, kept)  # `kept` keeps an id-keyed factory alive with its id
        while len(self._factories) > KEPT_POLICIES:  # the actors forget old policies too
            self._factories.popitem(last=False)
        return token


@dataclass(frozen=True)
class _Call:
    """One batch's arguments to `EpisodeWorker.play` besides the episode and the deadline."""

    token: str
    policy: Any
    """The factory, put in Ray's object store once per batch."""
    limits: RolloutLimits

    def remote(self, actor: Actor, ref: EpisodeRef, ends_at: float | None) -> Any:
        return actor.play.remote(ref, ends_at, self.limits, self.token, self.policy)


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


def _serve_token(env_id: str) -> dict[str, Any] | None:
    """The driver's `envhub serve` token for a remote id, for actors whose processes may not inherit
    the driver's environment (on a cluster, or when the token was set after Ray started)."""
    if not is_external(env_id):
        return None
    from envhub.serve.client import TOKEN_ENV  # a remote id needs the client anyway

    token = os.environ.get(TOKEN_ENV)
    return None if token is None else {"env_vars": {TOKEN_ENV: token}}


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
    `pool` keeps the actors for later batches; without one, actors are made for this batch and ended
    after it. `address` is where such a one-batch pool runs Ray (`auto`, `ray://host:port`); without
    it the current Ray connection is used, or a local Ray instance with one CPU per core is started
    (and shut down at the end). `workers` is the number of actors: by default one per CPU of the
    cluster, at most one per episode slot. The envs and the policy must be importable on the Ray
    workers (installed, or on PYTHONPATH).
    """
    refs = as_refs(episodes, seed)
    factory = functools.partial(load_policy, policy) if isinstance(policy, str) else policy
    if pool is not None:
        return await pool.play(
            env_id,
            factory,
            refs,
            limits=limits,
            env_kwargs=env_kwargs,
            on_episode=on_episode,
            workers=workers,
        )
    with RayEpisodePool(address) as once:
        return await once.play(
            env_id,
            factory,
            refs,
            limits=limits,
            env_kwargs=env_kwargs,
            on_episode=on_episode,
            workers=workers,
        )


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
    group: _Group,
    refs: list[EpisodeRef],
    *,
    call: _Call,
    slots: int,
    count: int,
    budget: float | None,
    on_episode: Callable[[Episode], None] | None,
    started: float,
    env_id: str,
) -> BatchResult:
    """Keep `slots` episodes in flight, slot i on actor i mod `count`, until none is left to start."""
    import ray
    from ray.exceptions import RayActorError

    pending = deque(refs)
    done: list[Episode] = []
    failures: list[Exception] = []
    ends_at = None if budget is None else time.time() + budget
    stop_at = None if budget is None else time.monotonic() + budget
    actors = group.actors[:count]

    async def slot(actor: Actor) -> None:
        while pending and not failures and (stop_at is None or time.monotonic() < stop_at):
            ref = pending.popleft()
            running = call.remote(actor, ref, ends_at)
            try:
                episode, incarnation = await running
            except RayActorError as exc:
                _drop(group, actor)
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
            if group.incarnations.setdefault(actor, incarnation) != incarnation:
                group.restarted.add(actor)
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


def _drop(group: _Group, actor: Actor) -> None:
    """Forget an actor that is dead for good; the group's next batch makes a fresh one."""
    if actor in group.actors:
        group.actors.remove(actor)
    group.incarnations.pop(actor, None)
    group.restarted.discard(actor)


def _retire_restarted(group: _Group) -> None:
    """End the actors Ray restarted, so the next batch starts with fresh ones and every restart left."""
    retired = [actor for actor in group.actors if actor in group.restarted]
    for actor in retired:
        _drop(group, actor)
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
    """A pool's close (and finalizer): end every group's actors, then Ray if the pool started it."""
    state.closed = True
    actors = [actor for group in state.groups.values() for actor in group.actors]
    state.groups.clear()
    _end_actors(actors)
    if state.started_ray:
        import ray

        with contextlib.suppress(Exception):
            ray.shutdown()
