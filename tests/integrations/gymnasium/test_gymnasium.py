"""The gymnasium adapter passes gymnasium's own checker and speaks text (and images) both ways."""

from __future__ import annotations

import io
import random
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from PIL import Image

import envhub
from envhub.integrations.gymnasium import to_gymnasium
from envhub.messages import ImagePart, TextPart

# swe-bench-lite's resets check out a real GitHub repository, which no test machine can reach: it is left
# out here (not skipped), and swe-mini checks the same env class offline.
NEEDS_REAL_REPOSITORIES = {"swe-bench-lite-v0"}
BUILT_IN = sorted(set(envhub.registry.index.ids()) - NEEDS_REAL_REPOSITORIES) if envhub.registry.index else []
OPTIONS: dict[str, dict[str, Any]] = {
    "desktop-osworld-v0": {"tasks": str(Path(__file__).parents[3] / "envs/desktop/tests/data/osworld")},
}
"""Ids that play only the tasks a user gives them: checked on the plugin's own test tasks."""


def gymnasium_complaints(caught: list[warnings.WarningMessage]) -> list[str]:
    """The checker's warnings; ResourceWarnings from other tests' garbage collection are not its concern."""
    return [str(w.message) for w in caught if not issubclass(w.category, ResourceWarning)]


@pytest.mark.parametrize("env_id", BUILT_IN)
def test_gymnasium_checker_passes_on_every_built_in_env(env_id: str) -> None:
    env = to_gymnasium(envhub.make(env_id, **OPTIONS.get(env_id, {})))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert gymnasium_complaints(caught) == []


def test_text_actions_with_tool_call_blocks_reach_the_tools() -> None:
    env = to_gymnasium(envhub.make("arithmetic"), render_mode="ansi")
    observation, info = env.reset(seed=4)
    assert "What is the result?" in observation
    assert {tool["function"]["name"] for tool in info["tools"]} == {"add", "subtract", "multiply"}
    observation, reward, terminated, truncated, _ = env.step(
        'thinking <tool_call>{"name": "add", "arguments": {"a": 40, "b": 2}}</tool_call>'
    )
    assert observation == "<tool_response>\n42\n</tool_response>"
    assert (reward, terminated, truncated) == (0.0, False, False)
    transcript = env.render()
    assert transcript is not None and '[assistant] thinking\n<tool_call>\n{"name": "add"' in transcript
    env.close()
    env.close()  # closing twice is allowed


def test_broken_tool_call_block_is_answered_not_dropped() -> None:
    env = to_gymnasium(envhub.make("arithmetic"))
    env.reset(seed=0)
    observation, *_ = env.step("<tool_call>{not json</tool_call>")
    assert "Error: unknown tool ''" in observation


class Picture(envhub.SingleTurnEnv):
    def setup(self, rng: random.Random) -> list[envhub.Message]:
        self.colour = rng.choice(["red", "blue"])
        buffer = io.BytesIO()
        Image.new("RGB", (8, 6), self.colour).save(buffer, format="PNG")
        image = ImagePart(data=buffer.getvalue())
        return [envhub.Message(role="user", content=[TextPart(text="What colour?"), image])]

    @envhub.reward
    def right(self, answer: str) -> float:
        return float(answer == self.colour)


def test_image_observations_are_rgb_arrays_and_pass_the_checker() -> None:
    env = to_gymnasium(Picture(), image_shape=(6, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert gymnasium_complaints(caught) == []
    observation, _ = env.reset(seed=0)
    assert observation["text"] == "What colour?"
    assert observation["image"].shape == (6, 8, 3) and observation["image"].dtype == np.uint8
    expected = [255, 0, 0] if env.env.colour == "red" else [0, 0, 255]  # type: ignore[attr-defined]
    assert observation["image"][0, 0].tolist() == expected
    _, reward, terminated, _, _ = env.step(env.env.colour)  # type: ignore[attr-defined]
    assert terminated and reward == 1.0


def test_adapter_works_inside_a_running_event_loop() -> None:
    """Notebooks run a loop already; the adapter must not try to nest one."""
    import asyncio

    async def inside() -> str:
        env = to_gymnasium(envhub.make("countdown"))
        observation, _ = env.reset(seed=1)
        return str(observation)

    assert "write an expression" in asyncio.run(inside())


def test_unsupported_render_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="render_mode must be None or 'ansi'"):
        to_gymnasium(envhub.make("countdown"), render_mode="human")
