"""Runs episodes: one env and one policy talking until the episode ends, many episodes at once.

The agent's mistakes are part of the episode (the env answers them); only failures of the machinery
(the env or the policy raising, or hanging past the step timeout) end an episode early. Those are
recorded, never lost, and retried a bounded number of times with a fresh environment; the agent's own
failures are never retried.

Each turn's `info` also holds `policy_seconds`, the time its policy call took, so a caller (the trainer)
can split an episode's wall time into model and environment time wherever the episode ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from envhub.core import Env, NotForkable, ResetInfo, StepInfo, check_forkable, recorded_action
from envhub.lock.stamp import stamp
from envhub.messages import Message
from envhub.policies.base import Generation, Policy
from envhub.record import seal
from envhub.record import tape as tapes
from envhub.records import RETRYABLE, Episode, EpisodeError, ErrorKind, Turn, episode_id
from envhub.registration import make, sandbox_kind
from envhub.wrappers import recorded

T = TypeVar("T")

POLICY_SECONDS = "policy_seconds"
"""The key of a turn's `info` where the runner records how long that turn's policy call took."""


class EpisodeRef(BaseModel):
    """Which episode to play: its place in the batch (its id), its task (the seed) and which rollout of it.

    A GRPO group is G references to one task; a plain batch is one reference per task.
    """

    model_config = ConfigDict(frozen=True)

    index: int = Field(ge=0)
    """Its place in the batch: the episode is stored as `episode_id(index)`."""
    seed: int | None
    """The seed `reset` gets, which picks the task; None lets the env choose."""
    task: int = Field(0, ge=0)
    rollout: int = Field(0, ge=0)
    """Which of the task's rollouts this is (0 for a batch of one rollout per task)."""


def plan(tasks: int, *, rollouts: int = 1, seed: int | None = 0) -> list[EpisodeRef]:
    """`tasks` × `rollouts` references: episode i is rollout i % rollouts of task i // rollouts,
    which plays seed `seed + task` (every rollout of a task sees the same task)."""
    if tasks < 0 or rollouts < 1:
        raise ValueError(f"need tasks >= 0 and rollouts >= 1, got {tasks} and {rollouts}")
    return [
        EpisodeRef(
            index=task * rollouts + k,
            seed=None if seed is None else seed + task,
            task=task,
            rollout=k,
        )
        for task in range(tasks)
        for k in range(rollouts)
    ]


def as_refs(episodes: int | Iterable[int | EpisodeRef], seed: int | None) -> list[EpisodeRef]:
    """References for a count, for bare indices (index i plays seed `seed + i`), or as given."""
    if isinstance(episodes, int):
        return plan(episodes, seed=seed)
    return [
        e
        if isinstance(e, EpisodeRef)
        else EpisodeRef(index=e, seed=None if seed is None else seed + e, task=e)
        for e in episodes
    ]


class RolloutLimits(BaseModel):
    """How long and how wide a batch may run: the one limits object of `rollout()`, `envhub rollout`'s
    flags and the trainer's config (`TrainConfig.limits`). Unknown fields are an error, so a typo in a
    config file never silently does nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    concurrency: int = Field(8, ge=1)
    """Episodes in flight at once."""
    backend_concurrency: dict[str, int] = Field(default_factory=dict)
    """Caps per sandbox kind (e.g. {"docker": 4}; `registration.sandbox_kind`), on top of `concurrency`:
    a unit of work (an episode, or a whole fork group) holds its kind's slot while it plays."""
    step_timeout: float | None = Field(None, gt=0)
    """Seconds one policy call or one env step may take before it counts as an infrastructure failure."""
    episode_timeout: float | None = Field(None, gt=0)
    """Seconds one episode may take; then it is cut off and recorded as truncated."""
    time_budget: float | None = Field(None, gt=0)
    """Seconds for the whole batch: in-flight stragglers are then cut off and recorded as truncated,
    and episodes not yet started are left for `--resume`."""
    retries: int = Field(1, ge=0)
    """Extra attempts for an episode that failed for infrastructure reasons."""
    record: bool = False
    """Keep every sandbox, REPL and tool call with its answer in the episode (`envhub replay` needs it)."""


class _Stopped(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class _Limits:
    """The step timeout and the deadline of one episode, applied to each call that may hang."""

    step_timeout: float | None
    deadline: float | None
    deadline_reason: str

    async def run(self, awaitable: Awaitable[T], what: str) -> T:
        """Await with the tighter of the two limits, saying which one ran out."""
        loop = asyncio.get_running_loop()
        left = None if self.deadline is None else self.deadline - loop.time()
        limits = [t for t in (self.step_timeout, left) if t is not None]
        if not limits:
            return await awaitable
        try:
            async with asyncio.timeout(max(min(limits), 0)):
                return await awaitable
        except TimeoutError:
            if left is not None and (self.step_timeout is None or left <= self.step_timeout):
                raise _Stopped("cutoff", f"{self.deadline_reason} ran out during the {what}") from None
            raise _Stopped(
                "timeout", f"the {what} took longer than the step timeout ({self.step_timeout:g} s)"
            ) from None


async def run_episode(
    env: Env,
    policy: Policy,
    *,
    seed: int | None = None,
    episode_id: str = "0",
    step_timeout: float | None = None,
    deadline: float | None = None,
    deadline_reason: str = "the time budget",
    on_messages: Callable[[list[Message]], None] | None = None,
    record: bool = False,
    env_kwargs: dict[str, Any] | None = None,
) -> Episode:
    """Play one episode of `env` with `policy` and return its full record.

    `deadline` is an event-loop time after which the episode is cut off and recorded as truncated.
    `on_messages` sees every message as it happens (prompt, action, answer): `envhub play` prints them.
    `record` keeps the episode's calls to its sandboxes and tools in `Episode.recording`, sealed with
    the user's recording key over the episode and `env_kwargs`, the options `env` was made with
    (`envhub.record.seal`).
    """
    if record:
        if not recorded(env):
            raise ValueError(
                f"{env!r} cannot be recorded: it was not made by envhub.make(), whose Recorder wrapper "
                "keeps the tape's turns; make it by id, or wrap it in envhub.wrappers.Recorder(env)"
            )
        key, salt = seal.load_key(), seal.new_salt()
        secrets = seal.Secrets(key, salt, episode_id)
        with tapes.using(tapes.Tape("record", secrets=secrets.derive)) as tape:
            episode = await run_episode(
                env, policy, seed=seed, episode_id=episode_id, step_timeout=step_timeout,
                deadline=deadline, deadline_reason=deadline_reason, on_messages=on_messages,
            )  # fmt: skip
        recording = tape.recording().model_copy(update={"salt": salt})
        return seal.seal(episode.model_copy(update={"recording": recording}), env_kwargs or {}, key)
    show = on_messages or (lambda messages: None)
    started = time.perf_counter()
    base = _base(env, policy, episode_id)
    limits = _Limits(step_timeout, deadline, deadline_reason)
    opened = await _reset(env, limits, base, seed)
    if isinstance(opened, Episode):
        return opened
    observation, fields = opened
    show(observation)
    play = _Play(messages=list(observation))
    await _play_turns(env, policy.for_episode(env), play, limits, show)
    return play.episode(base, **fields, wall_seconds=time.perf_counter() - started)


def _base(env: Env, policy: Policy, episode_id: str) -> dict[str, Any]:
    """The fields of an episode's record known before it starts."""
    spec = env.spec
    return {
        "episode_id": episode_id,
        "env_id": spec.id if spec else type(env).__name__,
        "env_version": spec.version if spec else None,
        "provenance": stamp(spec).provenance if spec else {},  # with the lock hash it runs under
        "policy": policy.name,
        "policy_info": policy.info(),
        "started_at": datetime.now(UTC),
    }


async def _reset(
    env: Env, limits: _Limits, base: dict[str, Any], seed: int | None
) -> tuple[list[Message], dict[str, Any]] | Episode:
    """Reset the env: the first observation and the record's fields it gives, or the failed episode."""
    try:
        observation, info = await limits.run(env.reset(seed=seed), "env reset")
        reset_info = ResetInfo.read(info)  # an env that writes a key the runner reads wrongly says so here
    except _Stopped as stop:
        failure = EpisodeError(kind=stop.kind, message=str(stop))
        return Episode(**base, seed=seed, prompt=[], truncated=stop.kind == "cutoff", error=failure)
    except Exception as exc:
        return Episode(
            **base, seed=seed, prompt=[], error=EpisodeError(kind="env_error", message=_describe(exc))
        )
    return observation, {
        "seed": reset_info.seed if reset_info.seed is not None else seed,
        "prompt": observation,
        "tools": list(env.tools),  # the schemas the policy saw: the stored `tools` column (docs/episodes.md)
        "isolation": reset_info.isolation,
        # The backend its sandbox ran on: through the fleet, the provider it landed on after failover.
        "sandbox_provider": (reset_info.isolation or {}).get("backend"),
    }


async def run_fork_group(
    env: Env,
    policy: Policy,
    *,
    fork_at: int,
    group: int,
    seed: int | None = None,
    episode_ids: Sequence[str] | None = None,
    step_timeout: float | None = None,
    deadline: float | None = None,
    deadline_reason: str = "the time budget",
) -> list[Episode]:
    """Play one prefix of `fork_at` turns, fork the env `group` times there, finish each child on its own.

    Returns the prefix's record first (unfinished: neither terminated nor truncated), then the children's,
    each whole (the prefix's turns, then its own) with `parent` the prefix's id and `fork_turn` the
    turns they share. `episode_ids` names the prefix and the children (default "0", "1", ...). A prefix
    that ends or fails before `fork_at` turns is forked where it stopped: its children are copies of
    it, with nothing left to play. An env that cannot fork raises NotForkable.
    """
    if fork_at < 1 or group < 1:
        raise ValueError(f"need fork_at >= 1 and group >= 1, got {fork_at} and {group}")
    ids = list(episode_ids) if episode_ids is not None else [str(i) for i in range(group + 1)]
    if len(ids) != group + 1:
        raise ValueError(f"a group of {group} needs {group + 1} episode ids (the prefix's first)")
    check_forkable(env)  # before the prefix is played for nothing
    started = time.perf_counter()
    base = _base(env, policy, ids[0])
    limits = _Limits(step_timeout, deadline, deadline_reason)
    opened = await _reset(env, limits, base, seed)
    if isinstance(opened, Episode):
        return _copies(opened, ids, 0)
    observation, fields = opened
    prefix = _Play(messages=list(observation))
    await _play_turns(env, policy.for_episode(env), prefix, limits, _quiet, until=fork_at)
    shared = prefix.episode(base, **fields, wall_seconds=time.perf_counter() - started)
    if prefix.over:
        return _copies(shared, ids, len(prefix.turns))
    try:
        children = await limits.run(env.fork(group), "env fork")
    except NotForkable:
        raise
    except (_Stopped, Exception) as exc:
        kind: ErrorKind = exc.kind if isinstance(exc, _Stopped) else "env_error"
        failed = shared.model_copy(update={"error": EpisodeError(kind=kind, message=_describe(exc))})
        return _copies(failed, ids, len(prefix.turns))

    async def finish(child: Env, child_id: str) -> Episode:
        play = _Play(list(prefix.messages), list(prefix.turns), dict(prefix.components))
        try:
            await _play_turns(child, policy.for_episode(child), play, limits, _quiet)
        finally:
            await _close_quietly(child)
        wall = time.perf_counter() - started
        record = {**base, "episode_id": child_id}
        return play.episode(record, **fields, wall_seconds=wall, parent=ids[0], fork_turn=len(prefix.turns))

    finished = await asyncio.gather(*(finish(c, i) for c, i in zip(children, ids[1:], strict=True)))
    return [shared, *finished]


def _copies(episode: Episode, ids: list[str], fork_turn: int) -> list[Episode]:
    """A group whose prefix stopped before the fork: the prefix, and children that are copies of it."""
    children = [
        episode.model_copy(update={"episode_id": i, "parent": ids[0], "fork_turn": fork_turn})
        for i in ids[1:]
    ]
    return [episode, *children]


def _quiet(messages: list[Message]) -> None:
    return


@dataclass
class _Play:
    """An episode as far as it has been played: what `_play_turns` extends, turn by turn."""

    messages: list[Message]
    turns: list[Turn] = field(default_factory=list)
    components: dict[str, float] = field(default_factory=dict)
    terminated: bool = False
    truncated: bool = False
    error: EpisodeError | None = None

    @property
    def over(self) -> bool:
        return self.terminated or self.truncated or self.error is not None

    def episode(self, base: dict[str, Any], **fields: Any) -> Episode:
        return Episode(
            **base,
            **fields,
            turns=self.turns,
            reward=sum(t.reward for t in self.turns),
            reward_components=self.components,
            terminated=self.terminated,
            truncated=self.truncated,
            error=self.error,
        )


async def _play_turns(
    env: Env,
    player: Policy,
    play: _Play,
    limits: _Limits,
    show: Callable[[list[Message]], None],
    *,
    until: int | None = None,
) -> None:
    """Play turns until the episode ends (or has `until` turns): the policy acts, the env answers."""
    while not play.over and (until is None or len(play.turns) < until):
        stage = "policy"
        asked = time.perf_counter()
        try:
            output = await limits.run(player.act(play.messages, env.tools), "policy call")
            policy_seconds = time.perf_counter() - asked
            action, tokens = (
                (output.message, output.tokens) if isinstance(output, Generation) else (output, None)
            )
            stage = "env"
            result = await limits.run(env.step(action), "env step")
            step_info = StepInfo.read(result.info)
        except _Stopped as stop:
            play.error = EpisodeError(kind=stop.kind, message=str(stop))
            play.truncated = stop.kind == "cutoff"
            return
        except Exception as exc:
            kind: ErrorKind = "policy_error" if stage == "policy" else "env_error"
            play.error = EpisodeError(kind=kind, message=_describe(exc))
            return
        recorded = recorded_action(action)
        show([recorded, *result.observation])
        play.messages.append(recorded)
        play.messages.extend(result.observation)
        play.terminated, play.truncated = result.terminated, result.truncated
        if step_info.reward_components is not None:
            play.components = step_info.reward_components
        play.turns.append(
            Turn(
                index=len(play.turns),
                action=recorded,
                observation=result.observation,
                reward=result.reward,
                info={**result.info, POLICY_SECONDS: policy_seconds},
                tokens=tokens,
            )
        )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class BatchResult(BaseModel):
    episodes: list[Episode]
    not_started: list[int] = Field(default_factory=list)
    """Indices of the episodes left unrun because the time budget ran out; `--resume` runs them."""
    wall_seconds: float


Unit = list[EpisodeRef]
"""One unit of work: a single episode, or a fork group (its prefix first, then its children)."""


class UnitRunner(Protocol):
    """Where units of work are played: an `EnvWorker` in this process, or calls to a Ray actor.

    `drive` keeps one queue for a batch and hands each runner up to `per_call` units at a time; the
    runner plays them (with the runner's retries) and returns their episodes. Both backends implement it.
    """

    per_call: int
    """The most units one `run` call takes (the Ray backend batches calls; one locally)."""

    async def run(self, units: list[Unit], budget_deadline: float | None) -> list[Episode]:
        """Play `units`; `budget_deadline` is the batch's end in this event loop's time (None: none)."""
        ...

    async def close(self) -> None:
        """Release what the runner holds (its env) once the queue is empty for it."""
        ...


async def drive(
    units: list[Unit],
    runners: Sequence[UnitRunner],
    *,
    time_budget: float | None,
    on_episode: Callable[[Episode], None] | None,
    started: float | None = None,
) -> BatchResult:
    """The one queue, budget and stop loop of every batch, whichever backend plays its units.

    Each runner takes units from one queue until it is empty, the time budget has run out (units not
    started are returned as `not_started`, for `--resume`) or a runner raised: then the others finish
    the units they hold (and hand on their episodes) and the first exception is raised. An exception of
    `on_episode` (the caller's) stops the batch at once.
    """
    loop = asyncio.get_running_loop()
    started = time.perf_counter() if started is None else started
    deadline = None if time_budget is None else loop.time() + time_budget
    pending = deque(units)
    done: list[Episode] = []
    failures: list[Exception] = []

    async def slot(runner: UnitRunner) -> None:
        try:
            while pending and not failures and (deadline is None or loop.time() < deadline):
                size = min(runner.per_call, -(-len(pending) // len(runners)))  # the tail spread out
                taken = [pending.popleft() for _ in range(min(size, len(pending)))]
                try:
                    episodes = await runner.run(taken, deadline)
                except Exception as exc:  # the env, the runner or a backend failed: stop taking units
                    failures.append(exc)
                    return
                done.extend(episodes)
                for episode in episodes:
                    if on_episode is not None:
                        on_episode(episode)
        finally:
            await runner.close()

    async with asyncio.TaskGroup() as group:
        for i, runner in enumerate(runners):
            group.create_task(slot(runner))
            if i % 256 == 255:
                await asyncio.sleep(0)  # a wide batch starts turning before its last runner is set up
    if failures:
        raise failures[0]
    return BatchResult(
        episodes=sorted(done, key=lambda e: e.episode_id),
        not_started=sorted(ref.index for unit in pending for ref in unit),
        wall_seconds=time.perf_counter() - started,
    )


def units_of(refs: list[EpisodeRef], limits: RolloutLimits, fork_at: int | None) -> list[Unit]:
    """A batch's units of work: one per episode, or with `fork_at` one per fork group."""
    return [[ref] for ref in refs] if fork_at is None else fork_groups(refs, limits)


async def run_batch(
    env_id: str,
    policy: Policy,
    *,
    episodes: int | Iterable[int | EpisodeRef],
    seed: int | None = 0,
    limits: RolloutLimits | None = None,
    env_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[Episode], None] | None = None,
    fork_at: int | None = None,
) -> BatchResult:
    """Play episodes: a count, the indices still to run (index i uses seed `seed + i`), or references.

    `limits.concurrency` `EnvWorker`s take units from one queue (`drive`), each on its own environment,
    under the per-sandbox caps `limits.backend_concurrency`. With `fork_at` the references of each task,
    in order, are one fork group (`plan(tasks, rollouts=G + 1)`): its first the prefix played to
    `fork_at` turns, the others the children forked there, all run at once on the group's worker.
    """
    limits = limits or RolloutLimits()
    units = units_of(as_refs(episodes, seed), limits, fork_at)
    sandbox_slots = {name: asyncio.Semaphore(n) for name, n in limits.backend_concurrency.items()}
    runners = [
        _LocalRunner(
            EnvWorker(env_id, env_kwargs or {}, policy, limits, seed=seed, backend_slots=sandbox_slots),
            fork_at,
        )
        for _ in range(min(limits.concurrency, max(len(units), 1)))
    ]
    return await drive(units, runners, time_budget=limits.time_budget, on_episode=on_episode)


def fork_groups(episodes: Iterable[EpisodeRef], limits: RolloutLimits) -> list[list[EpisodeRef]]:
    """The fork groups of a batch, whichever backend plays them: each task's references in order, the
    first its prefix and the others its children."""
    if limits.record:
        raise ValueError("recording forked episodes is not supported yet: roll out without --record")
    groups: dict[int, list[EpisodeRef]] = {}
    for ref in episodes:
        groups.setdefault(ref.task, []).append(ref)
    if any(len(g) < 2 for g in groups.values()):
        raise ValueError("each task needs a prefix and at least one child: plan(tasks, rollouts=G + 1)")
    return list(groups.values())


@dataclass
class _LocalRunner:
    """The local backend's `UnitRunner`: one `EnvWorker` playing one unit at a time in this process."""

    worker: EnvWorker
    fork_at: int | None
    per_call: int = 1

    async def run(self, units: list[Unit], budget_deadline: float | None) -> list[Episode]:
        played = []
        for unit in units:
            played += await self.worker.play_unit(unit, fork_at=self.fork_at, budget_deadline=budget_deadline)
        return played

    async def close(self) -> None:
        await self.worker.close()


class EnvWorker:
    """One environment playing episode after episode, with the runner's limits and retries.

    The environment is reset between episodes, so expensive setup (a sandbox, a browser) is paid once
    per worker; after an infrastructure failure it is closed and a fresh one made, since a crashed
    sandbox must not be reused. Both backends (asyncio here, Ray actors) play episodes through it.
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any],
        policy: Policy,
        limits: RolloutLimits,
        *,
        seed: int | None,
        backend_slots: dict[str, asyncio.Semaphore] | None = None,
    ) -> None:
        self.env_id, self.env_kwargs, self.policy, self.limits = env_id, env_kwargs, policy, limits
        self.seed = seed
        self.backend_slots = backend_slots or {}
        self.env: Env | None = None

    async def play(self, episode: int | EpisodeRef, *, budget_deadline: float | None = None) -> Episode:
        """Play one episode: a reference, or an index (seed `seed + index`); `budget_deadline` is the
        batch's, in loop time."""
        played = await self.play_unit(as_refs([episode], self.seed), budget_deadline=budget_deadline)
        return played[0]

    async def play_unit(
        self, refs: Unit, *, fork_at: int | None = None, budget_deadline: float | None = None
    ) -> list[Episode]:
        """Play one unit of work: one episode, or with `fork_at` a fork group (`run_fork_group`: refs[0]
        the prefix, the others its children), holding its sandbox kind's slot throughout.

        The unit is played again after an infrastructure failure of its episode (of a group's prefix or
        its fork); a child's own failure is recorded, not retried (its prefix state is gone).
        """
        episodes: list[Episode] = []
        for attempt in range(1, self.limits.retries + 2):
            try:
                env = self.env = self.env or make(self.env_id, **self.env_kwargs)
            except Exception as exc:  # a sandbox that could not start: retried like any infrastructure error
                episodes = [self._unmade(ref, exc, attempt) for ref in refs]
                continue
            async with self._slot(env):
                played = await self._play_once(env, refs, fork_at, budget_deadline)
            episodes = [e.model_copy(update={"attempts": attempt}) for e in played]
            failure = episodes[0].error
            if failure is None:
                break
            # A crashed sandbox, or one whose step was cancelled midway, must not serve the next episode.
            await _close_quietly(env)
            self.env = None
            if failure.kind not in RETRYABLE:
                break
        return episodes

    def _slot(self, env: Env) -> contextlib.AbstractAsyncContextManager[Any]:
        """The per-sandbox cap of the env's sandbox kind (`registration.sandbox_kind`), or none."""
        spec = env.spec
        kind = sandbox_kind(spec.provenance.default_sandbox, spec.env_kwargs) if spec else "none"
        slot = self.backend_slots.get(kind)
        return contextlib.nullcontext() if slot is None else slot

    def _unmade(self, ref: EpisodeRef, exc: Exception, attempt: int) -> Episode:
        """The record of an episode whose env could not be made."""
        return Episode(
            episode_id=episode_id(ref.index),
            env_id=self.env_id,
            seed=ref.seed,
            policy=self.policy.name,
            policy_info=self.policy.info(),
            prompt=[],
            error=EpisodeError(kind="env_error", message=f"making the env failed: {_describe(exc)}"),
            attempts=attempt,
        )

    async def close(self) -> None:
        if self.env is not None:
            await _close_quietly(self.env)
            self.env = None

    def _deadline(self, budget_deadline: float | None) -> tuple[float | None, str]:
        """The loop time an episode started now is cut off at, and which limit that is."""
        limits = self.limits
        loop = asyncio.get_running_loop()
        deadline = None if limits.episode_timeout is None else loop.time() + limits.episode_timeout
        reason = f"the episode timeout ({limits.episode_timeout or 0:g} s)"
        if budget_deadline is not None and (deadline is None or budget_deadline < deadline):
            deadline, reason = budget_deadline, f"the batch time budget ({limits.time_budget:g} s)"
        return deadline, reason

    async def _play_once(
        self, env: Env, refs: Unit, fork_at: int | None, budget_deadline: float | None
    ) -> list[Episode]:
        limits = self.limits
        deadline, reason = self._deadline(budget_deadline)
        if fork_at is not None:
            return await run_fork_group(
                env,
                self.policy,
                fork_at=fork_at,
                group=len(refs) - 1,
                seed=refs[0].seed,
                episode_ids=[episode_id(r.index) for r in refs],
                step_timeout=limits.step_timeout,
                deadline=deadline,
                deadline_reason=reason,
            )
        (ref,) = refs
        episode = await run_episode(
            env,
            self.policy,
            seed=ref.seed,
            episode_id=episode_id(ref.index),
            step_timeout=limits.step_timeout,
            deadline=deadline,
            deadline_reason=reason,
            record=limits.record,
            env_kwargs=self.env_kwargs,
        )
        return [episode]


async def _close_quietly(env: Env) -> None:
    """Close an env whose episode failed; its own close failing must not hide the original error."""
    with contextlib.suppress(Exception):  # the episode's own error is already recorded
        await env.close()
