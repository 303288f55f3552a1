"""Grade a stored episode afresh: its actions played again on a fresh env, in real sandboxes.

`envhub rescore` re-scores what the recording says the graders answered; this trusts nothing stored but
the agent's actions. Each episode's actions are played, in order, on a fresh env of its id and seed
(made with the batch's options), with no recording active, so every sandbox and grader runs for real
on the state those actions build (the final submission or answer included), and the fresh reward is
compared with the stored one. Turns whose observation came out different are listed (a tool's output
may legitimately vary between runs; the reward is what counts). Works on any stored batch, recorded
or not, sealed or not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from envhub.core import StepInfo
from envhub.record import seal
from envhub.record import tape as tapes
from envhub.records import Episode
from envhub.registration import make


class RegradeReport(BaseModel):
    """One episode graded afresh: its stored reward and components beside the fresh ones."""

    model_config = ConfigDict(frozen=True)

    episode_id: str
    env_id: str
    stored_reward: float
    stored_components: dict[str, float]
    reward: float | None = None
    """The reward its actions earn today in real sandboxes; None when the episode could not be played."""
    reward_components: dict[str, float] = {}
    observations_differ: list[int] = []
    """Turns whose fresh observation is not the stored one."""
    problem: str | None = None
    """Why the actions could not be played to their end (an env error, an early ending)."""
    sealed: bool | None = None
    """Whether the stored row's recording seal verifies; None when it has no recording."""

    @property
    def changed_components(self) -> list[str]:
        names = dict.fromkeys([*self.stored_components, *self.reward_components])
        return [n for n in names if self.stored_components.get(n) != self.reward_components.get(n)]

    @property
    def reward_differs(self) -> bool:
        return self.reward is not None and (
            self.reward != self.stored_reward or bool(self.changed_components)
        )


async def regrade_episode(episode: Episode, *, env_kwargs: dict[str, Any] | None = None) -> RegradeReport:
    """Play `episode`'s actions on a fresh env and grade them for real; see the module's docstring."""
    base: dict[str, Any] = {
        "episode_id": episode.episode_id,
        "env_id": episode.env_id,
        "stored_reward": episode.reward,
        "stored_components": episode.reward_components,
        "sealed": _sealed(episode, env_kwargs or {}),
    }
    if episode.error is not None:
        return RegradeReport(**base, problem=f"the stored episode ended in an error: {episode.error.message}")
    if tapes.current() is not None:
        raise RuntimeError("regrade_episode runs real sandboxes: call it outside a recording or a replay")
    env = make(episode.env_id, **(env_kwargs or {}))
    rewards: list[float] = []
    components: dict[str, float] = {}
    differ: list[int] = []
    try:
        observation, _ = await env.reset(seed=episode.seed)
        if [m.text for m in observation] != [m.text for m in episode.prompt]:
            return RegradeReport(
                **base,
                problem="the env's prompt for this seed is not the stored one, so the actions would "
                "answer another task",
            )
        for turn in episode.turns:
            result = await env.step(turn.action)
            rewards.append(result.reward)
            if [m.text for m in result.observation] != [m.text for m in turn.observation]:
                differ.append(turn.index + 1)
            if (found := StepInfo.read(result.info).reward_components) is not None:
                components = found
            ended = result.terminated or result.truncated
            if ended and turn.index + 1 < len(episode.turns):
                return RegradeReport(
                    **base,
                    observations_differ=differ,
                    problem=f"the episode ended at turn {turn.index + 1} of {len(episode.turns)}",
                )
    except Exception as exc:
        return RegradeReport(
            **base, observations_differ=differ, problem=f"the env raised {type(exc).__name__}: {exc}"
        )
    finally:
        await env.close()
    return RegradeReport(
        **base, reward=sum(rewards), reward_components=components, observations_differ=differ
    )


async def regrade(
    episodes: list[Episode],
    env_kwargs: dict[str, Any],
    *,
    on_episode: Callable[[RegradeReport], None] | None = None,
) -> list[RegradeReport]:
    """Regrade every episode, one after another (each opens its own real sandboxes)."""
    reports = []
    for episode in episodes:
        report = await regrade_episode(episode, env_kwargs=env_kwargs)
        reports.append(report)
        if on_episode is not None:
            on_episode(report)
    return reports


def _sealed(episode: Episode, env_kwargs: dict[str, Any]) -> bool | None:
    if episode.recording is None:
        return None
    try:
        seal.verify(episode, env_kwargs, seal.load_key(create=False))
    except (seal.UnsealedRecording, seal.RecordingKeyError):
        return False
    return True
