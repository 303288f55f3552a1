"""`web-tasks-v0`: MiniWoB-style tasks in a real headless Chromium, driven by tool calls.

One browser per environment object, launched at the first reset and reused; every episode gets a fresh
browser context (no cookies, storage or cache carried over) and a freshly drawn site served from
loopback. Requests to any other origin are blocked. A browser that dies mid-episode is an infrastructure
error (raised out of `step`), and the next reset launches a new one.

Every wait has a limit, so a page that never loads cannot hang an episode, and every limit is an option
of the env, generous by default, so a busy host does not fail honest episodes: a slow page is not a
broken one. The start page's load is tried again before reset gives up.

An episode forks (`Env.fork`): each child gets a context of its own in the same browser, with the
parent's cookies and localStorage, the parent's document reloaded from its URL and the agent's actions
on it replayed (`envhub_browser.fork` says what is carried and what is not).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import random
from collections.abc import Awaitable
from typing import Any, Literal, TypeVar
from urllib.parse import urljoin, urlsplit

from playwright.async_api import Browser, BrowserContext, Locator, Page, Playwright, Route, async_playwright
from playwright.async_api import Error as PlaywrightError

import envhub
from envhub.authoring.chat import Reaction
from envhub.core import InfrastructureError, NotForkable
from envhub.messages import ContentPart, ImagePart, Message, TextPart, ToolCall, user
from envhub_browser.browser import launch
from envhub_browser.fork import (
    Anchor,
    BrowserUsers,
    LoggedAction,
    first_difference,
    moved,
    moved_call,
    moved_state,
)
from envhub_browser.observe import observe
from envhub_browser.server import SiteServer
from envhub_browser.site import Element, Outcome, Site
from envhub_browser.tasks import TASKS

T = TypeVar("T")

LEAVING_JS = """
window.addEventListener('submit', e => { if (!e.defaultPrevented) window.__envhub_leaving = true; });
window.addEventListener('click', e => {
  const link = e.target instanceof Element ? e.target.closest('a[href]') : null;
  const away = link && !e.defaultPrevented && !link.getAttribute('href').startsWith('#');
  if (away) window.__envhub_leaving = true;
});
"""
"""Marks, synchronously inside the click or key press, a page that is about to be replaced by a navigation."""
PLAYWRIGHT_HANDLER_CACHE = "_pw_impl_instance_"
"""Playwright keeps its wrapper of a bound-method handler (`_gate`, `_loaded`) on the method's object
under this prefix; a child copying it would route its own page's requests to its parent's gate."""
CRASH_WORDS = ("has been closed", "crashed", "Target closed", "Browser closed", "Connection closed")


class ActionFailed(RuntimeError):
    """The page refused an action (no such element, not clickable, unknown key): the agent's to fix."""


class WebTasks(envhub.ToolEnv):
    """Web tasks in headless Chromium: observe a screenshot and a text view, act with browser tools."""

    system_prompt = (
        "You control a web browser to complete a task. Each observation shows the page as a text view, "
        "where interactive elements have ids in brackets like [3], and/or as a screenshot. Act with the "
        "tools; coordinates are viewport pixels. Call done() when the task is complete (with answer=... "
        "when the task asks for a value)."
    )

    def __init__(
        self,
        task: str | None = None,
        *,
        screenshot: bool = True,
        text_view: bool = True,
        width: int = 640,
        height: int = 480,
        max_text_chars: int = 6000,
        sandbox: bool | None = None,
        max_turns: int | None = None,
        navigation_timeout: float = 30.0,
        navigation_retries: int = 2,
        action_timeout: float = 10.0,
        settle_timeout: float = 15.0,
        launch_timeout: float = 60.0,
    ) -> None:
        if task is not None and task not in TASKS:
            raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)} (or None for all)")
        if not (screenshot or text_view):
            raise ValueError("turn on at least one of screenshot and text_view, or the agent sees nothing")
        if not (160 <= width <= 1920 and 160 <= height <= 1920):
            raise ValueError(f"width and height must be between 160 and 1920 pixels, got {width}x{height}")
        limits = {
            "navigation_timeout": navigation_timeout,
            "action_timeout": action_timeout,
            "settle_timeout": settle_timeout,
            "launch_timeout": launch_timeout,
        }
        too_short = {name: value for name, value in limits.items() if not value > 0}
        if too_short or navigation_retries < 0:
            raise ValueError(
                f"the time limits must be positive seconds and navigation_retries >= 0; got {too_short} "
                f"and navigation_retries={navigation_retries}"
            )
        super().__init__(max_turns=max_turns)
        self.navigation_timeout, self.navigation_retries = navigation_timeout, navigation_retries
        self.action_timeout, self.settle_timeout = action_timeout, settle_timeout
        self.launch_timeout = launch_timeout
        self.task_name = task
        self.screenshot, self.text_view = screenshot, text_view
        self.width, self.height, self.max_text_chars = width, height, max_text_chars
        self.sandbox = sandbox
        self.server = SiteServer()
        self.playwright: Playwright | None = None
        self.browser: Browser | None = None
        self.browser_tag = ""
        self.browser_launches = 0
        self.context: BrowserContext | None = None
        self.page: Page | None = None
        self.site: Site | None = None
        self.drawn = ""
        self.elements: dict[str, Element] = {}
        self.final_answer: str | None = None
        self.blocked_requests = 0
        self._lock = asyncio.Lock()
        self._loading = False
        self._browser_users = BrowserUsers()
        self.action_log: list[LoggedAction] = []
        """The browser tool calls of this episode, by turn: what a fork replays."""
        self.anchor = Anchor(url="", actions=0, turn=0)
        """The document the page shows, as a fork reopens it."""
        self._acting_turn = 0
        self._navigation: tuple[str, Anchor] | None = None
        """The main frame's last navigation request (its method, the anchor it makes), until it loads."""
        self.view = ""
        """The text view of the latest observation, whole: a fork's child must come to the same."""

    # --- episode lifecycle --------------------------------------------------------------------------

    async def setup(self, rng: random.Random) -> list[Message]:
        self.drawn = self.task_name or rng.choice(sorted(TASKS))
        self.site = TASKS[self.drawn].build(rng)
        self.final_answer, self.elements, self.blocked_requests = None, {}, 0
        self.action_log, self._acting_turn = [], 0
        origin = await self.server.start()
        self.server.site = self.site
        await self._open_in_fresh_context(origin + self.site.start)
        return [await self._observation(f"Task: {self.site.goal}\n\n")]

    async def _open_in_fresh_context(self, url: str, storage_state: Any = None) -> None:
        """A new browser context for the episode (nothing of the last one's cookies, storage or pages;
        a fork's child passes its parent's `storage_state`), every request through the gate, and `url`
        loaded as its page; subclasses serving their own pages (miniwob) start here."""
        await self._close_context()
        browser = await self._ensure_browser()
        context = self.context = await self._guard(
            browser.new_context(
                viewport={"width": self.width, "height": self.height},
                service_workers="block",
                accept_downloads=False,
                storage_state=storage_state,
            )
        )
        context.set_default_timeout(self.action_timeout * 1000)
        context.set_default_navigation_timeout(self.navigation_timeout * 1000)
        await self._guard(context.route("**/*", self._gate))
        await self._guard(context.add_init_script(LEAVING_JS))
        self.page = await self._guard(context.new_page())
        self.page.on("load", self._loaded)
        await self._open(url)

    async def _open(self, url: str) -> None:
        """Load the start page, trying afresh `navigation_retries` more times when it does not come in time.

        The page is the environment's own, so one that never loads is an infrastructure error, raised
        within (retries + 1) x `navigation_timeout`; a dead browser is one at once.
        """
        problem = ""
        for _ in range(self.navigation_retries + 1):
            try:
                await self._guard(self._page.goto(url))
                return
            except ActionFailed as exc:
                problem = str(exc)
            with contextlib.suppress(PlaywrightError):  # drop the stuck load, so the next try is fresh
                await self._page.goto("about:blank")
        raise InfrastructureError(
            f"the task's start page {url} did not load in {self.navigation_retries + 1} tries of "
            f"{self.navigation_timeout:g} s each (the last: {problem}); on a host this busy, raise "
            "navigation_timeout or navigation_retries of web-tasks"
        )

    def reset_info(self) -> dict[str, Any]:
        return {
            "task": self.drawn,
            "difficulty": TASKS[self.drawn].difficulty,
            "browser_launches": self.browser_launches,
        }

    async def react(self, message: Message) -> Reaction:
        self._acting_turn += 1
        reaction = await super().react(message)
        if reaction.done or self.final_answer is not None:
            return Reaction(observation=reaction.observation, done=True, info=reaction.info)
        observation = await self._observation()
        return Reaction(observation=[*reaction.observation, observation], info=reaction.info)

    async def close(self) -> None:
        await self._close_context()
        await self._leave_browser()
        await self.server.close()

    async def _leave_browser(self) -> None:
        """Stop using the browser; the last env of a fork family to leave it stops it and its driver."""
        browser, playwright, self.browser, self.playwright = self.browser, self.playwright, None, None
        if browser is None and playwright is None:
            return
        self._browser_users.count -= 1
        if self._browser_users.count > 0:
            return
        if browser is not None:
            with contextlib.suppress(PlaywrightError):
                await browser.close()
        if playwright is not None:
            with contextlib.suppress(Exception):  # the driver may already be gone with a crashed browser
                await playwright.stop()

    # --- fork -------------------------------------------------------------------------------------------

    async def __fork__(self, memo: dict[int, Any]) -> WebTasks:
        """A child in a new context of the same browser, at the parent's page (`envhub_browser.fork`)."""
        state = self.anchor.storage
        if state is None and self.context is not None:
            state = await self._guard(self.context.storage_state())
        for live in (self.context, self.page):
            memo[id(live)] = None
        for shared in (self.playwright, self.browser, self._browser_users):
            memo[id(shared)] = shared
        memo[id(self.server)] = await self.server.branch()
        try:
            child = await super().__fork__(memo)
        except BaseException:
            await memo[id(self.server)].close()
            raise
        for name in [n for n in vars(child) if n.startswith(PLAYWRIGHT_HANDLER_CACHE)]:
            del vars(child)[name]  # Playwright's wrapper of the parent's handler, bound to the parent
        if self.browser is not None or self.playwright is not None:
            self._browser_users.count += 1
        try:
            if state is not None and self.site is not None:
                await child._reach(self, state)
        except BaseException:
            await child.close()
            raise
        return child

    async def _reach(self, parent: WebTasks, state: Any) -> None:
        """Bring this new child's page to `parent`'s: storage, the anchor document, the actions on it."""
        assert self.site is not None and parent.site is not None
        old, new = parent.server.origin, self.server.origin
        self.server.site = self.site
        anchor = parent.anchor
        if not anchor.url:
            raise NotForkable(f"{parent!r} has not loaded a page of its site yet: reset it before forking")
        self.action_log = parent.action_log[: anchor.actions]
        self._acting_turn = anchor.turn
        self.site.log = copy.deepcopy(anchor.server_log)  # as it was before the document was asked for
        await self._open_in_fresh_context(moved(anchor.url, old, new), moved_state(state, old, new))
        replayed = parent.action_log[anchor.actions :]
        for logged in replayed:
            if logged.turn != self._acting_turn:  # the parent observed between turns: ids were stamped
                await self._view()
                self._acting_turn = logged.turn
            await self._call(moved_call(logged.call, old, new))
        self._acting_turn = parent._acting_turn
        await self._view()
        if self.view != parent.view:
            raise NotForkable(
                f"{self!r} could not bring a child to its parent's page: after reloading "
                f"{urlsplit(anchor.url).path} and replaying {len(replayed)} action(s), the text view "
                f"differs ({first_difference(parent.view, self.view)}); this page keeps state the replay "
                "cannot rebuild (scripts' memory, timers, a seed the env set): play each branch from reset"
            )

    async def _call(self, call: ToolCall) -> tuple[Message, str | None]:
        """Log each browser action (done() ends the episode: nothing to replay) before it runs."""
        if call.name != "done":
            self.action_log.append(LoggedAction(turn=self._acting_turn, call=call))
        return await super()._call(call)

    # --- rewards: read from the page, not from the agent --------------------------------------------

    @envhub.reward
    async def success(self, answer: str) -> float:
        """1 when the page's own state (or, for value questions, the answer) shows the task done."""
        assert self.site is not None and self.page is not None
        state = await self._guard(self.page.evaluate("() => window.__envhub_state || {}"))
        url = urlsplit(self.page.url)
        outcome = Outcome(
            path=url.path + (f"?{url.query}" if url.query else ""),
            state=state if isinstance(state, dict) else {},
            answer=self.final_answer if self.final_answer is not None else answer,
            server=self.site.log,
        )
        return float(self.site.check(outcome))

    @envhub.reward(weight=0.0)
    def actions(self, messages: list[Message]) -> float:
        """Recorded, not rewarded: how many browser actions the agent took."""
        return float(sum(len(m.tool_calls) for m in messages))

    @envhub.reward(weight=0.0)
    def blocked(self) -> float:
        """Recorded, not rewarded: requests to other origins that were blocked."""
        return float(self.blocked_requests)

    # --- tools ----------------------------------------------------------------------------------------

    @envhub.tool
    async def click(self, element: int) -> str:
        """Click an element by its id from the text view.

        Args:
            element: The number in brackets before the element, e.g. 3 for [3].
        """
        await self._act((await self._locate(element)).click())
        return f"clicked [{element}]"

    @envhub.tool
    async def click_at(self, x: int, y: int) -> str:
        """Click a point of the viewport, as a mouse would.

        Args:
            x: Pixels from the left edge of the viewport.
            y: Pixels from the top edge of the viewport.
        """
        self._check_point(x, y)
        await self._act(self._page.mouse.click(x, y))
        return f"clicked at ({x}, {y})"

    @envhub.tool
    async def type(self, text: str, element: int | None = None) -> str:
        """Type text: into an element by id (replacing what it holds), or else wherever the focus is.

        Args:
            text: The text to type.
            element: The id of a text field, text area or date field; omit to type into the focused one.
        """
        if element is None:
            await self._act(self._page.keyboard.type(text))
            return f"typed {text!r}"
        await self._act((await self._locate(element)).fill(text))
        return f"typed {text!r} into [{element}]"

    @envhub.tool
    async def press(self, key: str) -> str:
        """Press a key or a combination, e.g. Enter, Tab, Escape, ArrowDown, Control+A.

        Args:
            key: The key's name, as in Playwright and the DOM's KeyboardEvent.key.
        """
        await self._act(self._page.keyboard.press(key))
        return f"pressed {key}"

    @envhub.tool
    async def scroll(
        self, direction: Literal["up", "down", "left", "right"] = "down", amount: int = 400
    ) -> str:
        """Scroll the page with the mouse wheel over the middle of the viewport.

        Args:
            direction: Which way to scroll.
            amount: How far, in pixels.
        """
        dx = {"left": -amount, "right": amount}.get(direction, 0)
        dy = {"up": -amount, "down": amount}.get(direction, 0)
        await self._act(self._page.mouse.move(self.width / 2, self.height / 2))
        await self._act(self._page.mouse.wheel(dx, dy))
        await asyncio.sleep(0.05)  # wheel scrolling is applied asynchronously by the compositor
        return f"scrolled {direction} by {amount}"

    @envhub.tool
    async def select(self, element: int, option: str) -> str:
        """Choose an option of a dropdown by its visible text.

        Args:
            element: The dropdown's id.
            option: The option's text, as listed after options: in the text view.
        """
        await self._act((await self._locate(element)).select_option(label=option))
        return f"selected {option!r} in [{element}]"

    @envhub.tool
    async def drag(self, from_x: int, from_y: int, to_x: int, to_y: int) -> str:
        """Press the mouse at one point, move it to another and release it (sliders, drag and drop).

        Args:
            from_x: Where to press, pixels from the left.
            from_y: Where to press, pixels from the top.
            to_x: Where to release, pixels from the left.
            to_y: Where to release, pixels from the top.
        """
        self._check_point(from_x, from_y)
        self._check_point(to_x, to_y)
        mouse = self._page.mouse
        await self._act(mouse.move(from_x, from_y))
        await self._act(mouse.down())
        await self._act(mouse.move(to_x, to_y, steps=8))
        await self._act(mouse.up())
        return f"dragged from ({from_x}, {from_y}) to ({to_x}, {to_y})"

    @envhub.tool
    async def back(self) -> str:
        """Go back to the previous page, like the browser's back button."""
        response = await self._act(self._page.go_back())
        return "went back" if response is not None else "there is no previous page"

    @envhub.tool
    async def navigate(self, url: str) -> str:
        """Open a URL of this site; a path such as /login is enough. Other sites are not reachable.

        Args:
            url: A path or a full URL on the task's own site.
        """
        target = urljoin(self._page.url, url)
        if urlsplit(target)[:2] != urlsplit(self.server.origin)[:2]:
            raise ActionFailed(f"only this site's pages can be opened ({self.server.origin}); got {url!r}")
        await self._act(self._page.goto(target))
        return f"opened {urlsplit(target).path}"

    @envhub.tool
    async def done(self, answer: str = "") -> str:
        """Finish the episode. Call it once the task is complete.

        Args:
            answer: The value the task asked for, if it asked for one.
        """
        self.final_answer = answer
        return "finished"

    # --- the oracle -------------------------------------------------------------------------------------

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        """The task's planned steps in order (one per turn), then done(answer) with the expected answer."""
        assert self.site is not None
        taken = sum(1 for m in messages if m.role == "assistant")
        if taken >= len(self.site.oracle):
            call = ToolCall.create("done", {"answer": self.site.answer or ""}, id=f"call_{taken}")
            return Message(role="assistant", tool_calls=[call])
        step = self.site.oracle[taken]
        name, arguments = step(self.elements) if callable(step) else step
        arguments = dict(arguments)
        reference = arguments.get("element")
        if isinstance(reference, str) and reference.startswith("#"):
            found = self.elements.get(reference[1:])
            if found is None or found.eid == 0:
                raise RuntimeError(f"oracle of {self.drawn}: no interactive element {reference} on the page")
            arguments["element"] = found.eid
        return Message(role="assistant", tool_calls=[ToolCall.create(name, arguments, id=f"call_{taken}")])

    # --- machinery ----------------------------------------------------------------------------------------

    @property
    def _page(self) -> Page:
        if self.page is None:
            raise InfrastructureError("no page is open: reset() the environment first")
        return self.page

    async def _locate(self, element: int) -> Locator:
        """The element the agent named, or ActionFailed at once (rather than a timeout) if there is none."""
        locator = self._page.locator(f'[data-envhub-id="{element}"]')
        if await self._guard(locator.count()) == 0:
            raise ActionFailed(f"no element [{element}] on the page; use an id from the latest view")
        return locator.first

    def _check_point(self, x: int, y: int) -> None:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise ActionFailed(f"({x}, {y}) is outside the {self.width}x{self.height} viewport")

    async def _act(self, action: Awaitable[T]) -> T:
        """Run one browser action at a time, in call order, even when the agent sends several at once."""
        async with self._lock:
            return await self._guard(action)

    async def _guard(self, action: Awaitable[T]) -> T:
        """Await a Playwright call; a dead browser becomes InfrastructureError, anything else ActionFailed."""
        try:
            return await action
        except PlaywrightError as exc:
            message = (exc.message or str(exc)).strip().splitlines()[0]
            if self._browser_died(message):
                raise InfrastructureError(
                    f"the browser died ({message}); this episode is lost, the next reset starts a new browser"
                ) from exc
            raise ActionFailed(message) from None

    def _browser_died(self, message: str) -> bool:
        return (
            self.browser is None or not self.browser.is_connected() or any(w in message for w in CRASH_WORDS)
        )

    async def _ensure_browser(self) -> Browser:
        if self.browser is not None and self.browser.is_connected():
            return self.browser
        if self.playwright is not None:  # the previous browser died: start over with a new driver too
            with contextlib.suppress(Exception):
                await self.playwright.stop()
        if self.browser is not None:  # this env's share of the dead one: the family's last stops nothing
            self._browser_users.count -= 1
        self._browser_users = BrowserUsers()
        self.playwright = await async_playwright().start()
        self.browser, self.browser_tag = await launch(
            self.playwright, sandbox=self.sandbox, start_timeout=self.launch_timeout
        )
        self.browser_launches += 1
        return self.browser

    async def _close_context(self) -> None:
        context, self.context, self.page = self.context, None, None
        if context is not None:
            with contextlib.suppress(PlaywrightError):
                await context.close()

    async def _gate(self, route: Route) -> None:
        """Let requests to the task's own server through; block every other origin."""
        if urlsplit(route.request.url)[:2] == urlsplit(self.server.origin)[:2]:
            if (
                route.request.is_navigation_request()
                and self.page
                and route.request.frame == self.page.main_frame
            ):
                self._loading = True
                await self._note_navigation(route.request.method, route.request.url)
            await route.continue_()
        else:
            self.blocked_requests += 1
            await route.abort("blockedbyclient")

    async def _note_navigation(self, method: str, url: str) -> None:
        """Remember, for the anchor, what was logged and the storage before a new document loads
        (its request is held until then, so its scripts have not run)."""
        actions, turn, storage = len(self.action_log), self._acting_turn, None
        server_log = copy.deepcopy(self.site.log) if self.site is not None else {}
        if method == "GET" and self.context is not None:
            with contextlib.suppress(PlaywrightError):
                storage = await self.context.storage_state()
        anchor = Anchor(url=url, actions=actions, turn=turn, storage=storage, server_log=server_log)
        self._navigation = (method, anchor)

    def _loaded(self, page: Page) -> None:
        """A new document: the anchor a fork reopens, when it was loaded by GET (a redirect's target
        is not seen by the route, so a form sent by POST keeps the anchor before it)."""
        self._loading = False
        method, anchor = self._navigation or ("GET", Anchor("", len(self.action_log), self._acting_turn))
        self._navigation = None
        if method == "GET" and page.url.startswith(self.server.origin):
            self.anchor = dataclasses.replace(anchor, url=page.url)

    async def _settle(self) -> None:
        """Wait for a navigation the last action started (a link, a form sent with Enter) to load.

        The navigation's request reaches the route only a moment after the action returns, so the page
        itself says it is leaving (`LEAVING_JS`); until the next document replaces it, and while a
        main-frame request is in flight, wait (`settle_timeout` at most).
        """
        page = self._page
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settle_timeout
        while loop.time() < deadline:
            try:
                leaving = await self._guard(page.evaluate("() => window.__envhub_leaving === true"))
            except ActionFailed:
                leaving = True  # the old document went away mid-call: the new one is on its way
            if not (leaving or self._loading):
                break
            await asyncio.sleep(0.01)
        self._loading = False

    async def _observation(self, prefix: str = "") -> Message:
        """The page after an action: its text view and/or a screenshot, as one user message."""
        page = self._page
        text = await self._view()
        parts: list[ContentPart] = [
            TextPart(text=prefix + (text if self.text_view else text.splitlines()[0]))
        ]
        if self.screenshot:
            parts.append(ImagePart(data=await self._screenshot(page)))
        return user(parts)

    async def _screenshot(self, page: Page) -> bytes:
        """The viewport as PNG. Chromium on a busy host sometimes has no frame to give ("Unable to capture
        screenshot"): the host's moment, not the agent's doing, so it is asked again before the episode
        is given up as an env error (a dead browser is not retried: `_guard` says so)."""
        for pause in (0.2, 0.4):
            try:
                return await self._guard(page.screenshot(type="png"))
            except ActionFailed:
                await asyncio.sleep(pause)
        return await self._guard(page.screenshot(type="png"))  # the third time, its failure is the episode's

    async def _view(self) -> str:
        """The page's text view once the last action's navigation has settled; it stamps element ids."""
        page = self._page
        await self._settle()
        for attempt in range(3):  # a navigation the action started may replace the page while it is read
            with contextlib.suppress(PlaywrightError):
                await page.wait_for_load_state("load", timeout=self.settle_timeout * 1000)
            try:
                self.view, self.elements = await self._guard(observe(page, self.max_text_chars))
                break
            except ActionFailed:
                if attempt == 2:
                    raise
                await asyncio.sleep(0.1)
        return self.view
