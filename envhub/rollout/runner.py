"""Runs episodes: one env and one policy talking until the episode ends, many episodes at once.

The agent's mistakes are part of the episode (the env answers them); only failures of the machinery
(the env or the policy raising) end an episode early, and they are recorded, never lost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from envhub.core import Env, recorded_action
from envhub.messages import Message
from envhub.policies.base import Generation, Policy
from envhub.records import Episode, EpisodeError, Turn
from envhub.registration import make


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


async def run_episode(
    env: Env,
    policy: Policy,
    *,
    seed: int | None = None,
    episode_id: str = "0",
    on_messages: Callable[[list[Message]], None] | None = None,
) -> Episode:
    """Play one episode of `env` with `policy` and return its full record.

    `on_messages` sees every message as it happens (prompt, action, answer): `envhub play` prints them.
    """
    show = on_messages or (lambda messages: None)
    started = time.perf_counter()
    spec = env.spec
    base: dict[str, Any] = {
        "episode_id": episode_id,
        "env_id": spec.id if spec else type(env).__name__,
        "env_version": spec.version if spec else None,
        "provenance": spec.provenance if spec else {},
        "policy": policy.name,
    }
    try:
        observation, info = await env.reset(seed=seed)
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
        try:
            output = await player.act(messages, env.tools)
        except Exception as exc:
            error = EpisodeError(kind="policy_error", message=_describe(exc))
            break
        action, tokens = (output.message, output.tokens) if isinstance(output, Generation) else (output, None)
        try:
            result = await env.step(action)
        except Exception as exc:
            error = EpisodeError(kind="env_error", message=_describe(exc))
            break
        recorded = recorded_action(action)
        show([recorded, *result.observation])
        messages.append(recorded)
        messages.extend(result.observation)
        terminated, truncated = result.terminated, result.truncated
        components = result.info.get("reward_components", components)
        turns.append(
            Turn(
                index=len(turns),
                action=recorded,
                observation=result.observation,
                reward=result.reward,
                info=result.info,
                tokens=tokens,
            )
        )
    return Episode(
        **base,
        seed=info.get("seed", seed),
        prompt=observation,
        turns=turns,
        reward=sum(t.reward for t in turns),
        reward_components=components,
        terminated=terminated,
        truncated=truncated,
        error=error,
        wall_seconds=time.perf_counter() - started,
    )


async def run_batch(
    env_id: str,
    policy: Policy,
    *,
    episodes: int,
    concurrency: int = 8,
    seed: int | None = 0,
    env_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """Play `episodes` episodes with at most `concurrency` at once; episode i uses seed `seed + i`.

    Each worker owns one environment and resets it between episodes, so expensive setup (a sandbox,
    a browser) is paid once per worker, not once per episode.
    """
    if episodes < 0 or concurrency < 1:
        raise ValueError(f"need episodes >= 0 and concurrency >= 1, got {episodes} and {concurrency}")
    pending: asyncio.Queue[int] = asyncio.Queue()
    for index in range(episodes):
        pending.put_nowait(index)
    done: list[Episode] = []

    async def worker() -> None:
        async with make(env_id, **(env_kwargs or {})) as env:
            while not pending.empty():
                index = pending.get_nowait()
                episode = await run_episode(
                    env, policy, seed=None if seed is None else seed + index, episode_id=f"{index:06d}"
                )
                done.append(episode)
                if on_episode is not None:
                    on_episode(episode)

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, max(episodes, 1))):
            group.create_task(worker())
    return sorted(done, key=lambda e: e.episode_id)
