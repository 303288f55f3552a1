"""MiniWoB++ tasks in envhub's browser family: the `miniwob` wheel's own pages, scored by their own reward.

Each id is one task (`miniwob/click-test-v0`). The env is a `WebTasks` (envs/browser): the same
Chromium, the same tools and the same observation (text view + screenshot). What changes is where the
page comes from and who scores it:

- **Pages.** Every request to the task's origin (`http://miniwob.localhost`) is answered from the files
  inside the installed miniwob wheel (`route.fulfill`); nothing listens on a port and every other origin
  is blocked, as for the first-party tasks.
- **Episode start.** As miniwob's `SeleniumInstance` does it: `Math.seedrandom(seed)`, the data mode,
  `core.startEpisodeReal()`, then wait for `WOB_TASK_READY`. The page's human display (reward HUD, click
  canvas) is hidden, as BrowserGym does; the task area is untouched.
- **Reward.** The page's own `core.endEpisode` sets `WOB_RAW_REWARD_GLOBAL` (-1..1, partial credit
  where the task gives it); it is read with miniwob's own query and reward processors
  (`miniwob.reward.get_raw_reward`, `get_original_reward`). The episode ends when the page says so
  (`WOB_DONE_GLOBAL`). After that the START cover cannot draw a second problem: one page, one episode.
- **Clock.** MiniWoB tasks end themselves after 10-30 s (reward -1, "timed out"), a limit made for
  fast scripted agents. By default the page gets 1000 s, as BrowserGym gives it; `time_limit=None`
  keeps the task's own limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import mimetypes
import random
import secrets
from typing import Any
from urllib.parse import unquote, urlsplit

from envhub_browser import WebTasks
from miniwob.reward import get_original_reward, get_raw_reward  # type: ignore[import-untyped]
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Route

import envhub
from envhub.authoring.chat import Reaction
from envhub.core import InfrastructureError
from envhub.messages import Message, ToolCall
from envhub_miniwob.catalog import HTML_DIR, VERSION, MiniWoBTaskInfo, tasks
from envhub_miniwob.page import SNAPSHOT_JS, Snapshot
from envhub_miniwob.solutions import SOLUTIONS, next_call

ORIGIN = "http://miniwob.localhost"
"""The task pages' origin; requests to it are answered from the wheel, so no server runs."""
METADATA_JS = (
    "(episode) => window.__envhubEpisode !== episode ? null : "
    "({done: WOB_DONE_GLOBAL, env_reward: WOB_REWARD_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL, "
    "reason: WOB_REWARD_REASON === null ? null : String(WOB_REWARD_REASON)})"
)
"""miniwob's `SeleniumInstance.get_metadata` query, asked only of the page this episode started: the
agent's tools can navigate, and another task page (an easy one, solved) must not score this episode."""
LEFT_THE_PAGE = {
    "done": True,
    "env_reward": 0.0,
    "raw_reward": 0.0,
    "reason": "the agent left the task page before it scored the episode",
}
START_JS = """
([seed, mode, limitMs]) => {
  if (limitMs !== null) core.EPISODE_MAX_TIME = limitMs;
  if (window.jQuery) window.jQuery.fx.off = true;  // no animation: one screenshot per seed
  Math.seedrandom(seed);
  core.setDataMode(mode);
  core.startEpisodeReal();
  core.startEpisodeReal = function () {};  // one page, one episode: the START cover draws no second one
  const hud = document.createElement('style');
  hud.textContent = '#reward-display, #click-canvas { display: none !important; }';
  document.head.appendChild(hud);
}
"""
ANIMATED_JS = "() => !(window.jQuery && window.jQuery(':animated').length)"
DEFAULT_TIME_LIMIT = 1000.0
MAX_TIMER_SECONDS = 2_000_000.0
"""setTimeout fires at once past 2**31 - 1 ms, so a longer page clock would end the episode at its start."""


class MiniWoBEnv(WebTasks):
    """A MiniWoB++ task from the miniwob package, played in headless Chromium with the browser tools."""

    forkable = (
        "a MiniWoB task is started by scripts the env runs at reset (its seed, startEpisodeReal), which a "
        "child's replay of the agent's actions cannot repeat; play each branch from reset"
    )

    task: str = ""
    """The miniwob task name (its `subdomain`), set by each id's subclass in `envhub_miniwob.tasks`; an
    instance may be pointed at another task between episodes (one browser for many tasks)."""
    system_prompt = (
        "You control a web browser to complete a small task on a web page. Each observation shows the "
        "page as a text view, where interactive elements have ids in brackets like [3], and/or as a "
        "screenshot. Act with the tools; coordinates are viewport pixels. The episode ends when the page "
        "scores your actions; call done() to give up."
    )

    def __init__(
        self,
        *,
        time_limit: float | None = DEFAULT_TIME_LIMIT,
        data_mode: str = "train",
        screenshot: bool = True,
        text_view: bool = True,
        width: int | None = None,
        height: int | None = None,
        max_text_chars: int = 6000,
        sandbox: bool | None = None,
        max_turns: int | None = None,
        navigation_timeout: float = 30.0,
        navigation_retries: int = 2,
        action_timeout: float = 10.0,
        settle_timeout: float = 15.0,
        launch_timeout: float = 60.0,
    ) -> None:
        if self.task not in tasks():
            raise ValueError(
                f"{type(self).__name__} names no miniwob task ({self.task!r}); make one by id, "
                "e.g. envhub.make('miniwob/click-test')"
            )
        if time_limit is not None and not 0 < time_limit <= MAX_TIMER_SECONDS:
            raise ValueError(
                f"time_limit must be in (0, {MAX_TIMER_SECONDS:g}] seconds, or None for the task's own "
                f"limit; got {time_limit}"
            )
        window = self.task_info.window
        super().__init__(
            screenshot=screenshot,
            text_view=text_view,
            width=width or window[0],
            height=height or window[1],
            max_text_chars=max_text_chars,
            sandbox=sandbox,
            max_turns=max_turns,
            navigation_timeout=navigation_timeout,
            navigation_retries=navigation_retries,
            action_timeout=action_timeout,
            settle_timeout=settle_timeout,
            launch_timeout=launch_timeout,
        )
        self.time_limit, self.data_mode = time_limit, data_mode
        self.server.origin = ORIGIN  # the tools' same-origin checks (navigate) read it; nothing listens
        self.utterance = ""
        self.snapshot: Snapshot | None = None
        self.metadata: dict[str, Any] = {}
        self._episode_mark = ""
        """A fresh random mark set on the page each episode starts; the score is read only from it."""

    @property
    def task_info(self) -> MiniWoBTaskInfo:
        return tasks()[self.task]

    # --- episode lifecycle --------------------------------------------------------------------------

    async def setup(self, rng: random.Random) -> list[Message]:
        """A fresh context and page, the task's page from the wheel, then miniwob's episode start."""
        if self.task not in tasks():
            raise ValueError(f"no miniwob task {self.task!r}; choose one of envhub_miniwob.catalog.tasks()")
        self.drawn = self.task
        self.final_answer, self.elements, self.blocked_requests = None, {}, 0
        self.snapshot, self.metadata = None, {}
        await self._open_in_fresh_context(f"{ORIGIN}/{self.task_info.path}")
        await self._start_episode()
        observation = await self._observation(f"Task: {self.utterance}\n\n")
        await self._take_snapshot()
        return [observation]

    async def _start_episode(self) -> None:
        """Seed, start and wait for the task as miniwob's `SeleniumInstance.begin_task` does."""
        page = self._page
        self._episode_mark = secrets.token_hex(16)
        limit_ms = None if self.time_limit is None else round(self.time_limit * 1000)
        seed = self.seed if self.seed is not None and abs(self.seed) < 2**53 else str(self.seed)
        try:
            await page.wait_for_function("() => typeof core !== 'undefined' && !!core.cover_div")
            await page.evaluate(START_JS, [seed, self.data_mode, limit_ms])
            await page.wait_for_function("() => WOB_TASK_READY === true")
            await page.evaluate("(episode) => { window.__envhubEpisode = episode; }", self._episode_mark)
            utterance = await page.evaluate("() => core.getUtterance()")
        except PlaywrightError as exc:
            if self._browser_died(str(exc)):
                raise InfrastructureError(f"the browser died while starting {self.task}: {exc}") from exc
            raise InfrastructureError(
                f"miniwob task {self.task} did not start in its page ({exc.message.splitlines()[0]}); "
                f"its files are in {HTML_DIR}"
            ) from exc
        self.utterance = utterance["utterance"] if isinstance(utterance, dict) else str(utterance)

    def reset_info(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "utterance": self.utterance,
            "miniwob_version": VERSION,
            "browser_launches": self.browser_launches,
        }

    async def react(self, message: Message) -> Reaction:
        """The browser's answer to the tools; the episode ends when the page has scored it."""
        reaction = await super().react(message)
        self.metadata = await self._read_metadata()
        info = {**reaction.info, "miniwob": self.metadata}
        if reaction.done or self.metadata["done"]:
            return Reaction(observation=reaction.observation, done=True, info=info)
        await self._take_snapshot()
        return Reaction(observation=reaction.observation, info=info)

    async def _read_metadata(self) -> dict[str, Any]:
        """The page's score; a page this episode did not start (the agent navigated away) scores 0."""
        metadata: dict[str, Any] | None = await self._guard(
            self._page.evaluate(METADATA_JS, self._episode_mark)
        )
        return dict(LEFT_THE_PAGE) if metadata is None else metadata

    # --- rewards: the page's own ------------------------------------------------------------------

    @envhub.reward
    async def success(self, answer: str) -> float:
        """MiniWoB's raw reward (`WOB_RAW_REWARD_GLOBAL`): 1 solved, -1 wrong, partial credit between,
        0 while the page has not ended the episode. The agent's answer plays no part: the page scores."""
        return float(get_raw_reward(await self._read_metadata()))

    @envhub.reward(weight=0.0)
    async def time_scaled(self) -> float:
        """Recorded, not rewarded: miniwob's default reward, the raw one scaled by the time left."""
        return float(get_original_reward(await self._read_metadata()))

    # --- the oracle -----------------------------------------------------------------------------------

    def reference_action(self, messages: list[Message]) -> envhub.Action | None:  # type: ignore[override]
        """The scripted solution's next step, read from the page as it was last observed.

        Only the tasks in `SOLUTIONS` have one; for the others there is no reference: None, as
        `envhub.Env.reference_action` allows (WebTasks narrows it, since all its tasks have one).
        """
        solve = SOLUTIONS.get(self.task)
        if solve is None or self.snapshot is None:
            return None
        name, arguments = next_call(solve, self.snapshot)
        taken = sum(1 for m in messages if m.role == "assistant")
        return Message(role="assistant", tool_calls=[ToolCall.create(name, arguments, id=f"call_{taken}")])

    async def _take_snapshot(self) -> None:
        """Read the utterance, fields and visible elements for the scripted solution (after the text
        view, so the elements carry the ids the agent sees)."""
        if self.task not in SOLUTIONS:
            return
        with contextlib.suppress(PlaywrightError):  # read the page once jQuery's animations have run
            await self._page.wait_for_function(ANIMATED_JS, timeout=self.settle_timeout * 1000)
        data = await self._guard(self._page.evaluate(SNAPSHOT_JS))
        self.snapshot = Snapshot.read(self.task, data, step=self.turn)

    # --- machinery ----------------------------------------------------------------------------------------

    async def _gate(self, route: Route) -> None:
        """Answer the task origin's requests from the wheel's files; block every other origin."""
        request = route.request
        if not request.url.startswith(ORIGIN + "/"):
            self.blocked_requests += 1
            await route.abort("blockedbyclient")
            return
        if request.is_navigation_request() and self.page and request.frame == self.page.main_frame:
            self._loading = True
        found = await asyncio.to_thread(wheel_file, urlsplit(request.url).path)
        with contextlib.suppress(PlaywrightError):  # the page may be gone before its last request
            if found is None:
                await route.fulfill(status=404, body="not found", content_type="text/plain")
            else:
                await route.fulfill(body=found[0], content_type=found[1])


@functools.cache
def wheel_file(url_path: str) -> tuple[bytes, str] | None:
    """The bytes and content type of a file of the wheel's html folder, or None outside it or missing.

    Cached: a few hundred small files, read once per process rather than once per episode.
    """
    root = HTML_DIR.resolve()
    path = (root / unquote(url_path).lstrip("/")).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return path.read_bytes(), kind + ("; charset=utf-8" if kind.startswith("text/") else "")
