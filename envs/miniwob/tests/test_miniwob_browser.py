"""MiniWoB++ tasks in a real headless Chromium: the scripted solutions score the maximum, tasks load and
return the page's own reward, episodes are seeded and end when the page scores them, and the arrival
check (determinism, oracle, random baseline, Parquet store) passes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from envhub_browser.browser import chromium_path
from envhub_browser.policy import RandomWebPolicy
from envhub_miniwob.solutions import SOLUTIONS
from envhub_miniwob.tasks import env_class

from envhub.messages import Message, ToolCall
from envhub.policies import OraclePolicy, RandomPolicy
from envhub.rollout import rollout, run_episode
from envhub.store import read_episodes

pytestmark = pytest.mark.skipif(
    chromium_path() is None and os.environ.get("ENVHUB_CHROMIUM") != "playwright",
    reason="no Chromium: install Debian's `chromium` (CI does) or set ENVHUB_CHROMIUM",
)

LOAD_SAMPLE = [
    "book-flight", "choose-date", "click-pie", "drag-items", "email-inbox", "terminal", "tic-tac-toe",
    "use-colorwheel",
]  # fmt: skip
"""Tasks of every kind (widgets, drag, canvas, inboxes, timers); benchmarks/baselines.py loads them all."""


def call(name: str, **arguments: object) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, dict(arguments))])


def calls(*pairs: tuple[str, dict[str, object]]) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(n, dict(a)) for n, a in pairs])


async def test_scripted_solutions_score_the_maximum_in_one_browser() -> None:
    env = env_class("click-test")(screenshot=False, max_turns=30)
    failed = []
    try:
        for name in SOLUTIONS:
            env.task = name
            episode = await run_episode(env, OraclePolicy(), seed=3)
            if not (episode.reward == 1.0 and episode.terminated and episode.error is None):
                failed.append((name, episode.reward, episode.error, episode.reward_components))
        assert env.browser_launches == 1
    finally:
        await env.close()
    assert failed == []
    assert len(SOLUTIONS) >= 25


async def test_sampled_tasks_load_and_the_random_baseline_gets_the_page_reward() -> None:
    """Each loads its page from the wheel, starts, shows its utterance and ends with a reward in [-1, 1]."""
    env = env_class("click-test")(screenshot=False, max_turns=4)
    try:
        for name in LOAD_SAMPLE:
            env.task = name
            observation, info = await env.reset(seed=0)
            assert info["task"] == name and info["utterance"]
            assert f"Task: {info['utterance']}" in observation[-1].text
            episode = await run_episode(env, RandomWebPolicy(seed=1, width=500, height=320), seed=0)
            assert episode.error is None, (name, episode.error)
            assert -1.0 <= episode.reward_components["success"] <= 1.0
            assert episode.reward_components["blocked"] == 0
    finally:
        await env.close()


async def test_same_seed_same_task_and_a_wrong_answer_scores_minus_one() -> None:
    async with env_class("enter-text")(screenshot=False) as env:
        first, _ = await env.reset(seed=5)
        again, _ = await env.reset(seed=5)
        other, _ = await env.reset(seed=6)
        assert first[-1].text == again[-1].text
        assert first[-1].text != other[-1].text
        await env.reset(seed=5)
        result = await env.step(call("type", text="not the name", element=1))
        assert not result.terminated and result.info["miniwob"]["done"] is False
        result = await env.step(call("click", element=2))  # Submit
        assert result.terminated
        assert result.reward == -1.0
        assert result.info["reward_components"]["success"] == -1.0


async def test_after_the_page_scores_no_action_can_draw_a_new_problem() -> None:
    """The START cover that core.js shows after an episode would start a fresh problem (and zero the
    reward) when clicked; a second call in the same message clicks it."""
    async with env_class("click-test")(screenshot=False) as env:
        await env.reset(seed=0)
        assert env.snapshot is not None
        x, y = env.snapshot.by_id("subbtn").centre
        result = await env.step(calls(("click_at", {"x": x, "y": y}), ("click_at", {"x": 80, "y": 105})))
        assert result.terminated
        assert result.reward == 1.0
        assert result.info["miniwob"]["done"] is True


async def test_the_task_own_clock_ends_the_episode_with_minus_one() -> None:
    async with env_class("click-test")(screenshot=False, time_limit=0.2) as env:
        await env.reset(seed=0)
        await asyncio.sleep(1.0)
        result = await env.step(call("press", key="Tab"))
        assert result.terminated
        assert result.reward == -1.0
        assert result.info["miniwob"]["reason"] == "timed out"


async def test_screenshot_and_text_view_are_the_browser_family_s() -> None:
    async with env_class("click-checkboxes")() as env:
        observation, _ = await env.reset(seed=1)
        (image,) = observation[-1].images
        assert image.data.startswith(b"\x89PNG")
        text = observation[-1].text
        assert "url: /miniwob/click-checkboxes.html" in text
        assert 'button "Submit"' in text and "checkbox" in text
        assert "Last reward" not in text and "Episodes done" not in text  # the HUD is hidden


async def test_generic_random_policy_is_answered_not_crashed() -> None:
    env = env_class("click-test")(screenshot=False, max_turns=4)
    try:
        episode = await run_episode(env, RandomPolicy(seed=0), seed=0)
    finally:
        await env.close()
    assert episode.error is None


async def test_an_episode_round_trips_through_the_parquet_store(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    result = await rollout("miniwob/login-user", OraclePolicy(), episodes=1, seed=0, out=out,
                           env_kwargs={"screenshot": False})  # fmt: skip
    stored = read_episodes(out)
    assert [e.reward for e in stored] == [1.0]
    assert [e.messages for e in stored] == [e.messages for e in result.episodes]
    assert {e.env_id for e in stored} == {"miniwob/login-user-v0"}


async def test_another_task_page_cannot_score_the_episode() -> None:
    """Red team: the agent opens an easy task's page on the same origin, starts it and solves it. The
    score is read only from the page this episode started, so the hard task still scores 0 and ends."""
    async with env_class("click-test")(screenshot=False) as easy:
        await easy.reset(seed=0)
        assert easy.snapshot is not None
        x, y = easy.snapshot.by_id("subbtn").centre
        easy_page = f"/{easy.task_info.path}"
    async with env_class("book-flight")(screenshot=False) as env:
        await env.reset(seed=0)
        hack = calls(
            ("navigate", {"url": easy_page}),
            ("click_at", {"x": 80, "y": 105}),  # the START cover: starts the easy task
            ("click_at", {"x": x, "y": y}),  # solves it
        )
        result = await env.step(hack)
        assert result.terminated
        assert result.reward == 0.0
        assert "left the task page" in result.info["miniwob"]["reason"]
