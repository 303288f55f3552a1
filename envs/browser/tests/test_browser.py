"""envhub-browser in a real headless Chromium: every task's oracle succeeds, success is read from the page,
episodes share nothing, other origins are unreachable, and a dead browser is an infrastructure error."""

from __future__ import annotations

import asyncio
import os
import signal
import struct
from pathlib import Path
from typing import Any

import pytest
from envhub_browser import TASKS, WebTasks
from envhub_browser.browser import chromium_path, chromium_pids
from envhub_browser.env import ActionFailed
from envhub_browser.policy import RandomWebPolicy
from envhub_browser.server import SiteServer
from envhub_browser.site import Response, document
from playwright.async_api import Error as PlaywrightError

import envhub
from envhub.core import InfrastructureError
from envhub.messages import Message, ToolCall
from envhub.policies import OraclePolicy, RandomPolicy
from envhub.policies.base import Policy
from envhub.records import Episode
from envhub.rollout import run_episode
from envhub.tools import ToolSpec

pytestmark = pytest.mark.skipif(
    chromium_path() is None and os.environ.get("ENVHUB_CHROMIUM") != "playwright",
    reason="no Chromium: install Debian's `chromium` (CI does) or set ENVHUB_CHROMIUM",
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
UNCAPTURED = "Page.screenshot: Protocol error (Page.captureScreenshot): Unable to capture screenshot"
"""What Playwright said when a busy host's Chromium had no frame to give (a CI run, 2026-12-07)."""


def make(task: str | None = None, **kwargs: Any) -> WebTasks:
    env = envhub.make("web-tasks", task=task, **kwargs)
    assert isinstance(env, WebTasks)
    return env


def call(name: str, **arguments: object) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, dict(arguments))])


async def play_all(
    jobs: list[tuple[str, int]], policy: Policy, *, workers: int = 2, **kwargs: Any
) -> list[Episode]:
    """Play (task, seed) jobs on `workers` environments, each reused across episodes as the runner does."""
    queue = list(jobs)
    played: list[Episode] = []

    async def worker() -> None:
        env = make(**kwargs)
        try:
            while queue:
                name, seed = queue.pop()
                env.task_name = name
                episode = await run_episode(env, policy, seed=seed)
                played.append(episode.model_copy(update={"policy_info": {"task": name}}))
        finally:
            await env.close()

    await asyncio.gather(*(worker() for _ in range(workers)))
    return played


def test_catalogue_has_graded_tasks_and_the_browser_tools() -> None:
    env = envhub.make("web-tasks")
    assert env.spec is not None and env.spec.id == "web-tasks-v0"
    assert env.spec.provenance.package == "envhub-browser"
    assert len(TASKS) >= 20
    assert {t.difficulty for t in TASKS.values()} == {1, 2, 3}
    assert all(t.description for t in TASKS.values())
    assert {t.name for t in env.tools} == {
        "click", "click_at", "type", "press", "scroll", "select", "drag", "back", "navigate", "done",
    }  # fmt: skip


async def test_oracle_solves_every_task_on_two_seeds() -> None:
    episodes = await play_all([(name, seed) for name in TASKS for seed in (0, 1)], OraclePolicy())
    assert len(episodes) == 2 * len(TASKS)
    failed = [
        (e.policy_info["task"], e.seed, e.error, e.reward_components) for e in episodes if e.reward != 1.0
    ]
    assert failed == []
    assert all(e.terminated and e.reward_components["blocked"] == 0 for e in episodes)


async def test_random_baselines_play_without_errors_and_score_below_the_oracle() -> None:
    jobs = [(name, 0) for name in TASKS]
    episodes = await play_all(jobs, RandomWebPolicy(seed=0), max_turns=5, screenshot=False)
    assert [e.error for e in episodes] == [None] * len(jobs)
    assert sum(e.reward for e in episodes) / len(episodes) < 0.5
    # envhub's generic random policy sends nonsense arguments: answered as tool errors, never a crash
    generic = await play_all([("fill-form", 0), ("drag-slider", 1)], RandomPolicy(seed=0), max_turns=4)
    assert [e.error for e in generic] == [None, None]


def artifacts(tmp_path: Path) -> Path:
    """Where screenshots are kept: $ENVHUB_TEST_ARTIFACTS (CI uploads it), else pytest's temporary folder."""
    folder = Path(os.environ.get("ENVHUB_TEST_ARTIFACTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save(path: Path, data: bytes) -> None:
    path.write_bytes(data)


def saved(folder: Path) -> set[str]:
    return {p.name for p in folder.glob("*.png")}


async def test_screenshots_are_png_of_the_viewport(tmp_path: Path) -> None:
    folder = artifacts(tmp_path)
    async with make(width=640, height=480) as env:
        for name in ("click-shape", "drag-slider", "login", "wizard"):
            env.task_name = name
            observation, _ = await env.reset(seed=3)
            (image,) = observation[-1].images
            assert image.mime_type == "image/png"
            assert image.data.startswith(PNG_MAGIC)
            width, height = struct.unpack(">II", image.data[16:24])  # the IHDR chunk
            assert (width, height) == (640, 480)
            assert 1_000 < len(image.data) < 300_000
            save(folder / f"{name}.png", image.data)
    assert saved(folder) >= {"click-shape.png", "drag-slider.png", "login.png", "wizard.png"}


async def test_a_screenshot_chromium_cannot_capture_at_once_is_asked_again() -> None:
    """A busy host's Chromium sometimes has no frame to give; the observation asks again rather than
    losing a correct episode as an env error. Twice is retried; a third failure is the episode's."""
    async with make("click-shape") as env:
        await env.reset(seed=0)
        page = env._page
        real = page.screenshot
        failures = [2]

        async def flaky(**kwargs: Any) -> bytes:
            if failures[0] > 0:
                failures[0] -= 1
                raise PlaywrightError(UNCAPTURED)
            return await real(**kwargs)

        page.screenshot = flaky  # type: ignore[method-assign]
        observation, _, _, _, _ = await env.step(call("scroll", direction="down"))
        (image,) = observation[-1].images
        assert failures == [0] and image.data.startswith(PNG_MAGIC)

        failures[0] = 3
        with pytest.raises(ActionFailed, match="Unable to capture screenshot"):
            await env._observation()


async def test_text_view_lists_element_ids_and_either_view_can_be_turned_off() -> None:
    async with make("select-dropdown", screenshot=False) as env:
        observation, info = await env.reset(seed=0)
        text = observation[-1].text
        assert info["task"] == "select-dropdown" and info["difficulty"] == 1
        assert observation[-1].images == []
        assert text.startswith("Task: Select ") and "url: /" in text
        assert '[1] combobox "City" selected=' in text and '[2] button "Submit"' in text
        assert env.page is not None
        assert await env.page.get_attribute("#city", "data-envhub-id") == "1"
    async with make("select-dropdown", text_view=False) as env:
        observation, _ = await env.reset(seed=0)
        assert "combobox" not in observation[-1].text and len(observation[-1].images) == 1
    with pytest.raises(ValueError, match="at least one"):
        WebTasks(screenshot=False, text_view=False)
    with pytest.raises(ValueError, match="unknown task"):
        WebTasks(task="solitaire")


async def test_same_seed_same_page_and_seeds_vary() -> None:
    async with make(screenshot=False) as env:
        seen = [(await env.reset(seed=s))[0][-1].text for s in (5, 5, 6, 7, 8)]
    assert seen[0] == seen[1]
    assert len(set(seen[1:])) > 1


async def test_success_is_read_from_the_page_not_from_the_agents_claim() -> None:
    async with make("click-button", screenshot=False) as env:
        await env.reset(seed=0)
        result = await env.step(call("done", answer="I clicked it"))
        assert result.terminated and result.reward == 0.0
    async with make("read-value", screenshot=False) as env:  # a value question: checked host-side
        await env.reset(seed=0)
        assert env.site is not None and env.site.answer
        assert (await env.step(call("done", answer="Z00000"))).reward == 0.0
        await env.reset(seed=0)
        assert (await env.step(call("done", answer=env.site.answer))).reward == 1.0


async def test_agent_mistakes_are_answered_and_the_episode_goes_on() -> None:
    async with make("enter-text", screenshot=False) as env:
        await env.reset(seed=0)
        for action, expected in [
            (call("click", element=999), "no element [999] on the page"),
            (call("click_at", x=5000, y=10), "outside the 640x480 viewport"),
            (call("press", key="NotAKey"), "Error: press failed"),
            (call("navigate", url="https://example.com/"), "only this site's pages"),
            (call("select", element=1, option="x"), "Error: select failed"),
        ]:
            result = await env.step(action)
            assert not result.terminated
            assert result.info["error"]["kind"] == "tool_error"
            assert expected in result.observation[0].text, result.observation[0].text
            assert "url: /" in result.observation[-1].text  # and a fresh view of the page follows


async def test_other_origins_are_blocked_even_on_loopback() -> None:
    async with make("click-link", screenshot=False) as env:
        await env.reset(seed=0)
        assert env.page is not None
        other_port = "http://127.0.0.1:9/" if not env.server.origin.endswith(":9") else "http://127.0.0.1:10/"
        for url in ("https://example.com/", other_port):
            outcome = await env.page.evaluate(f"fetch({url!r}).then(() => 'reached', () => 'blocked')")
            assert outcome == "blocked"
        assert env.blocked_requests == 2
        result = await env.step(call("navigate", url="/p/none"))
        assert "url: /p/none" in result.observation[-1].text  # the own origin stays reachable


async def test_episodes_share_no_cookies_or_storage() -> None:
    async with make("login", screenshot=False) as env:
        first = await run_episode(env, OraclePolicy(), seed=4)
        assert first.reward == 1.0
        assert env.page is not None and env.context is not None
        await env.page.evaluate("localStorage.setItem('left', 'behind')")
        await env.reset(seed=4)
        assert await env.context.cookies() == []
        assert await env.page.evaluate("localStorage.getItem('left')") is None
        result = await env.step(call("navigate", url="/account"))  # the last episode's session is gone
        assert "Please log in" in result.observation[-1].text


class KillsTheBrowser(Policy):
    """Kills Chromium mid-episode, as an out-of-memory kill would, then asks for a click."""

    name = "kills-the-browser"

    def __init__(self, env: WebTasks) -> None:
        self.env = env

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Message:
        await kill_chromium(self.env.browser_tag)
        return call("click", element=1)


async def kill_chromium(tag: str) -> None:
    """SIGKILL the env's Chromium, as an out-of-memory kill would, and wait until its process is gone
    (so the next action meets a dead browser); a process still there after 30 s fails the test."""
    (pid,) = chromium_pids(tag)
    os.kill(pid, signal.SIGKILL)
    for _ in range(600):
        if not chromium_pids(tag):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"Chromium (pid {pid}) was still there 30 s after SIGKILL")


async def test_a_crashed_browser_is_an_infrastructure_error_and_the_next_episode_relaunches() -> None:
    async with make("click-button", screenshot=False) as env:
        await env.reset(seed=0)
        await kill_chromium(env.browser_tag)
        with pytest.raises(InfrastructureError, match="browser died"):
            await env.step(call("click", element=1))

        crashed = await run_episode(env, KillsTheBrowser(env), seed=1)
        assert crashed.error is not None and crashed.error.kind == "env_error"
        assert "browser died" in crashed.error.message

        recovered = await run_episode(env, OraclePolicy(), seed=2)
        assert recovered.error is None and recovered.reward == 1.0
        assert env.browser_launches == 3
    assert chromium_pids(env.browser_tag) == []  # close() leaves no Chromium behind


# ---------------------------------------------------------------- slow hosts and pages that never load


class SlowSiteServer(SiteServer):
    """The task's own server on a loaded host: its first answer comes after `delay` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay, self.answered = delay, 0

    async def _respond(self, reader: asyncio.StreamReader) -> Response:
        self.answered += 1
        if self.answered == 1:
            await asyncio.sleep(self.delay)
        return await super()._respond(reader)


class HangingSiteServer(SiteServer):
    """A page that never loads: every request is read, counted, and left unanswered until `release`."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0
        self.release = asyncio.Event()

    async def _respond(self, reader: asyncio.StreamReader) -> Response:
        await reader.readuntil(b"\r\n\r\n")
        self.requests += 1
        await self.release.wait()
        return Response(document("Late", "<h1>Too late</h1>"))


async def test_an_honest_page_slower_than_two_seconds_still_resets() -> None:
    """A start page that takes 3 s (a busy host) used to end the episode as an env error at 2 s."""
    env = make("click-button")
    env.server = SlowSiteServer(delay=3.0)
    try:
        observation, _ = await env.reset(seed=0)
        assert observation[-1].text.startswith("Task: ")
        assert env.server.answered >= 1
        assert env.elements  # the page was read
    finally:
        await env.close()


async def test_a_page_that_never_loads_fails_reset_within_its_retries() -> None:
    env = make("click-button", navigation_timeout=0.5, navigation_retries=1)
    server = env.server = HangingSiteServer()
    try:
        async with asyncio.timeout(120):  # a guard for the test run, far above the 2 x 0.5 s bound
            with pytest.raises(InfrastructureError, match=r"did not load in 2 tries of 0.5 s each"):
                await env.reset(seed=0)
        assert server.requests == 2  # the first load, and one retry
    finally:
        server.release.set()
        await env.close()


def test_every_limit_is_an_option_and_must_be_positive() -> None:
    env = make(navigation_timeout=90, navigation_retries=5, action_timeout=20, settle_timeout=40)
    assert (env.navigation_timeout, env.navigation_retries) == (90, 5)
    assert (env.action_timeout, env.settle_timeout, env.launch_timeout) == (20, 40, 60)
    with pytest.raises(ValueError, match="positive seconds"):
        make(action_timeout=0)
    with pytest.raises(ValueError, match="navigation_retries >= 0"):
        make(navigation_retries=-1)


def test_the_random_web_policy_records_its_seed_and_engine() -> None:
    info = RandomWebPolicy(seed=7, stop=0.2).info()
    assert info == {
        "name": "random-web",
        "engine": "envhub_browser.policy.RandomWebPolicy",
        "seed": 7,
        "stop": 0.2,
    }
