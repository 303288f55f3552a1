"""The info keys the runner reads (seed, isolation, reward_components, reward_notes) are typed in the core."""

from __future__ import annotations

import random
from typing import Any

import pytest

import envhub
from envhub.core import ResetInfo, StepInfo
from envhub.policies import load_policy
from envhub.rollout import run_episode


class Sandboxed(envhub.SingleTurnEnv):
    """An env whose `reset_info` reports isolation the way an author might get wrong."""

    def __init__(self, isolation: Any) -> None:
        super().__init__()
        self.isolation = isolation

    def setup(self, rng: random.Random) -> str:
        return "Say hi."

    def reset_info(self) -> dict[str, Any]:
        return {"isolation": self.isolation, "kind": "greeting"}

    @envhub.reward
    def polite(self, answer: str) -> float:
        return float("hi" in answer)


async def test_reset_info_keeps_the_typed_keys_and_the_envs_own() -> None:
    _, info = await Sandboxed({"network": "none"}).reset(seed=3)
    assert info == {"seed": 3, "turn": 0, "tools": [], "isolation": {"network": "none"}, "kind": "greeting"}
    assert ResetInfo.read(info).isolation == {"network": "none"}


async def test_an_isolation_report_that_is_not_json_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match="ResetInfo is malformed: isolation"):
        await Sandboxed("bubblewrap, probably").reset(seed=3)


async def test_the_final_step_carries_typed_reward_components() -> None:
    env = Sandboxed(None)
    await env.reset(seed=1)
    result = await env.step("hi there")
    assert StepInfo.read(result.info).reward_components == {"polite": 1.0}


def test_step_info_names_a_component_that_is_not_a_number() -> None:
    with pytest.raises(ValueError, match=r"reward_components\.polite"):
        StepInfo.read({"reward_components": {"polite": "high"}})


class HandWritten(envhub.Env):
    """An env written on the bare contract, so nothing but the runner checks the info it returns."""

    def __init__(self, reset_info: dict[str, Any], step_info: dict[str, Any]) -> None:
        super().__init__()
        self._reset_info, self._step_info = reset_info, step_info

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        return [envhub.Message(role="user", content="go")], self._reset_info

    async def step(self, action: envhub.Action) -> envhub.StepResult:
        return envhub.StepResult([], 1.0, True, False, self._step_info)


async def test_the_runner_stores_the_typed_keys_of_a_hand_written_env() -> None:
    env = HandWritten({"seed": 41, "isolation": {"network": "none"}}, {"reward_components": {"done": 1.0}})
    episode = await run_episode(env, load_policy("random:0"), seed=7)
    assert (episode.error, episode.seed, episode.isolation) == (None, 41, {"network": "none"})
    assert episode.reward_components == {"done": 1.0}


@pytest.mark.parametrize(
    ("reset_info", "step_info", "key"),
    [({"isolation": "bubblewrap, probably"}, {}, "isolation"), ({}, {"reward_components": [1.0]}, "reward")],
)
async def test_the_runner_ends_an_episode_whose_info_key_is_malformed_naming_it(
    reset_info: dict[str, Any], step_info: dict[str, Any], key: str
) -> None:
    episode = await run_episode(HandWritten(reset_info, step_info), load_policy("random:0"), seed=7)
    assert episode.error is not None and episode.error.kind == "env_error"
    assert f"is malformed: {key}" in episode.error.message
