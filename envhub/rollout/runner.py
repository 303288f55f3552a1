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
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from envhub.core import Env, ResetInfo, StepInfo, recorded_action
from envhub.messages import Message
from envhub.policies.base import Generation, Policy
from envhub.records import RETRYABLE, Episode, EpisodeError, ErrorKind, Turn, episode_id
from envhub.registration import make
from envhub.sandbox import recording as tapes

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
    """How long and how wide a batch may run."""

    model_config = ConfigDict(frozen=True)

    concurrency: int = Field(8, ge=1)
    """Episodes in flight at once."""
    backend_concurrency: dict[str, int] = Field(default_factory=dict)
    """Caps per sandbox backend (e.g. {"docker": 4}), on top of `concurrency`."""
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
) -> Episode:
    """Play one episode of `env` with `policy` and return its full record.

    `deadline` is an event-loop time after which the episode is cut off and recorded as truncated.
    `on_messages` sees every message as it happens (prompt, action, answer): `envhub play` prints them.
    `record` keeps the episode's calls to its sandboxes and tools in `Episode.recording`.
    """
    if record:
        with tapes.using(tapes.Tape("record")) as tape:
            episode = await run_episode(
                env, policy, seed=seed, episode_id=episode_id, step_timeout=step_timeout,
                deadline=deadline, deadline_reason=deadline_reason, on_messages=on_messages,
            )  # fmt: skip
        return episode.model_copy(update={"recording": tape.recording()})
    show = on_messages or (lambda messages: None)
    started, started_at = time.perf_counter(), datetime.now(UTC)
    spec = env.spec
    base: dict[str, Any] = {
        "episode_id": episode_id,
        "env_id": spec.id if spec else type(env).__name__,
        "env_version": spec.version if spec else None,
        "provenance": spec.provenance if spec else {},
        "policy": policy.name,
        "policy_info": policy.info(),
        "started_at": started_at,
    }
    limits = _Limits(step_timeout, deadline, deadline_reason)
    tapes.mark_turn(0)
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
    show(observation)
    player = policy.for_episode(env)
    messages = list(observation)
    turns: list[Turn] = []
    components: dict[str, float] = {}
    terminated = truncated = False
    error: EpisodeError | None = None
    while not (terminated or truncated):
        stage = "policy"
        asked = time.perf_counter()
        try:
            output = await limits.run(player.act(messages, env.tools), "policy call")
            policy_seconds = time.perf_counter() - asked
            action, tokens = (
                (output.message, output.tokens) if isinstance(output, Generation) else (output, None)
            )
            stage = "env"
            tapes.mark_turn(len(turns) + 1)
            result = await limits.run(env.step(action), "env step")
            step_info = StepInfo.read(result.info)
        except _Stopped as stop:
            error = EpisodeError(kind=stop.kind, message=str(stop))
            truncated = stop.kind == "cutoff"
            break
        except Exception as exc:
            error = EpisodeError(
                kind="policy_error" if stage == "policy" else "env_error", message=_describe(exc)
            )
            break
        recorded = recorded_action(action)
        show([recorded, *result.observation])
        messages.append(recorded)
        messages.extend(result.observation)
        terminated, truncated = result.terminated, result.truncated
        if step_info.reward_components is not None:
            components = step_info.reward_components
        turns.append(
            Turn(
                index=len(turns),
                action=recorded,
                observation=result.observation,
                reward=result.reward,
                info={**result.info, POLICY_SECONDS: policy_seconds},
                tokens=tokens,
            )
        )
    return Episode(
        **base,
        seed=reset_info.seed if reset_info.seed is not None else seed,
        prompt=observation,
        tools=list(env.tools),  # the schemas the policy saw: the stored `tools` column (docs/episodes.md)
        turns=turns,
        reward=sum(t.reward for t in turns),
        reward_components=components,
        terminated=terminated,
        truncated=truncated,
        error=error,
        wall_seconds=time.perf_counter() - started,
        isolation=reset_info.isolation,
    )


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class BatchResult(BaseModel):
    episodes: list[Episode]
    not_started: list[int] = Field(default_factory=list)
    """Indices of the episodes left unrun because the time budget ran out; `--resume` runs them."""
    wall_seconds: float


async def run_batch(
    env_id: str,
    policy: Policy,
    *,
    episodes: int | Iterable[int | EpisodeRef],
    seed: int | None = 0,
    limits: RolloutLimits | None = None,
    env_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> BatchResult:
    """Play episodes: a count, the indices still to run (index i uses seed `seed + i`), or references.

    `limits.concurrency` `EnvWorker`s take references from one queue, each on its own environment.
    """
    limits = limits or RolloutLimits()
    refs = as_refs(episodes, seed)
    pending: asyncio.Queue[EpisodeRef] = asyncio.Queue()
    for ref in refs:
        pending.put_nowait(ref)
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    budget_deadline = None if limits.time_budget is None else loop.time() + limits.time_budget
    backend_slots: dict[str, asyncio.Semaphore] = {
        name: asyncio.Semaphore(n) for name, n in limits.backend_concurrency.items()
    }
    done: list[Episode] = []

    async def worker() -> None:
        env_worker = EnvWorker(
            env_id, env_kwargs or {}, policy, limits, seed=seed, backend_slots=backend_slots
        )
        try:
            while not pending.empty():
                if budget_deadline is not None and loop.time() >= budget_deadline:
                    return
                episode = await env_worker.play(pending.get_nowait(), budget_deadline=budget_deadline)
                done.append(episode)
                if on_episode is not None:
                    on_episode(episode)
        finally:
            await env_worker.close()

    async with asyncio.TaskGroup() as group:
        for _ in range(min(limits.concurrency, max(len(refs), 1))):
            group.create_task(worker())
    not_started = sorted(pending.get_nowait().index for _ in range(pending.qsize()))
    return BatchResult(
        episodes=sorted(done, key=lambda e: e.episode_id),
        not_started=not_started,
        wall_seconds=time.perf_counter() - started,
    )


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
        (ref,) = as_refs([episode], self.seed)
        return await self._play(ref, budget_deadline)

    async def _play(self, ref: EpisodeRef, budget_deadline: float | None) -> Episode:
        episode: Episode | None = None
        for attempt in range(1, self.limits.retries + 2):
            try:
                env = self.env = self.env or make(self.env_id, **self.env_kwargs)
            except Exception as exc:  # a sandbox that could not start: retried like any infrastructure error
                episode = Episode(
                    episode_id=episode_id(ref.index),
                    env_id=self.env_id,
                    seed=ref.seed,
                    policy=self.policy.name,
                    policy_info=self.policy.info(),
                    prompt=[],
                    error=EpisodeError(kind="env_error", message=f"making the env failed: {_describe(exc)}"),
                    attempts=attempt,
                )
                continue
            backend = (env.spec.provenance.default_sandbox if env.spec else None) or "none"
            slot = self.backend_slots.get(backend)
            if slot is None:
                episode = await self._play_once(env, ref, budget_deadline)
            else:
                async with slot:
                    episode = await self._play_once(env, ref, budget_deadline)
            episode = episode.model_copy(update={"attempts": attempt})
            if episode.error is None:
                break
            # A crashed sandbox, or one whose step was cancelled midway, must not serve the next episode.
            await _close_quietly(env)
            self.env = None
            if episode.error.kind not in RETRYABLE:
                break
        assert episode is not None  # the loop runs at least once
        return episode

    async def close(self) -> None:
        if self.env is not None:
            await _close_quietly(self.env)
            self.env = None

    async def _play_once(self, env: Env, ref: EpisodeRef, budget_deadline: float | None) -> Episode:
        limits = self.limits
        loop = asyncio.get_running_loop()
        deadline = None if limits.episode_timeout is None else loop.time() + limits.episode_timeout
        reason = f"the episode timeout ({limits.episode_timeout or 0:g} s)"
        if budget_deadline is not None and (deadline is None or budget_deadline < deadline):
            deadline, reason = budget_deadline, f"the batch time budget ({limits.time_budget:g} s)"
        return await run_episode(
            env,
            self.policy,
            seed=ref.seed,
            episode_id=episode_id(ref.index),
            step_timeout=limits.step_timeout,
            deadline=deadline,
            deadline_reason=reason,
            record=limits.record,
        )


async def _close_quietly(env: Env) -> None:
    """Close an env whose episode failed; its own close failing must not hide the original error."""
    with contextlib.suppress(Exception):  # the episode's own error is already recorded
        await env.close()
