"""`desktop-v0`: tasks on a private X11 desktop, seen as screenshots, played with pointer and key tools.

Each episode gets a desktop of its own (a sandbox, local or docker by the `backend` option, running
Xvfb, openbox and the task's app, see `envhub_desktop.desktop`) with the task's seeded files; it is
closed when the next episode starts or the env closes, so nothing of one episode reaches the next. With
`spare=True` (the default) the next episode's desktop (sandbox, display, window manager) is started in
the background while this one plays, and reset only writes the files and starts the app.

Actions from one assistant message run one at a time, in order. The episode ends with done(), or when the
agent answers without a tool call; the reward reads the file the app saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any, Literal

import envhub
from envhub.authoring.chat import Reaction
from envhub.core import InfrastructureError, NotForkable
from envhub.messages import ImagePart, Message, TextPart, ToolCall, user
from envhub_desktop.actions import Click, DesktopAction, Drag, Keys, MoveTo, Scroll, TypeText, Wait, points
from envhub_desktop.desktop import Backend, Desktop, DesktopBroken
from envhub_desktop.office import install_profile
from envhub_desktop.pyautogui import parse
from envhub_desktop.tasks import FAMILIES, TASKS, Episode, Saved, Task


class DesktopEnv(envhub.ToolEnv):
    """A real desktop in a local or docker sandbox: observe a screenshot and the window list, act."""

    system_prompt = (
        "You control a Linux desktop to complete a task. Each observation is a screenshot and the list of "
        "visible windows (the focused one marked *). Act with the tools; coordinates are screen pixels "
        "from the top-left corner. Call done() when the task is complete."
    )

    family: str | None = None
    """The application family whose tasks this id draws (None: every family's); see `tasks.FAMILIES`."""

    def __init__(
        self,
        task: str | None = None,
        *,
        width: int = 1280,
        height: int = 800,
        screenshot: bool = True,
        spare: bool = True,
        settle: float = 0.2,
        max_turns: int | None = None,
        backend: Backend = "local",
    ) -> None:
        if task is not None and task not in self.tasks:
            raise ValueError(
                f"unknown task {task!r}; choose one of {', '.join(self.tasks)} (or None for all of them)"
            )
        if not 0 <= settle <= 5:
            raise ValueError(f"settle is the pause before each screenshot, 0 to 5 s; got {settle}")
        super().__init__(max_turns=max_turns if max_turns is not None else 30)
        Desktop(width=width, height=height, backend=backend)  # validates them now, not at the first reset
        self.backend: Backend = backend
        """The sandbox the desktops run in: `local` (bubblewrap) or `docker` (sandboxes/desktop/build.sh's
        image); also what `envhub.registration.sandbox_kind` reads to count an episode against its cap."""
        self.task_name = task
        self.width, self.height = width, height
        self.screenshot, self.spare, self.settle = screenshot, spare, settle
        self.desktop: Desktop | None = None
        self.episode: Episode | None = None
        self.drawn = ""
        self.finished = False
        self.broken: str | None = None
        """Why the agent's desktop stopped working (its X server or window manager killed, its process
        limit used up), which ends the episode with reward 0; None while it works."""
        self.reset_seconds = 0.0
        self.used_spare = False
        self._next: asyncio.Task[Desktop] | None = None
        self._next_loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()

    @property
    def tasks(self) -> dict[str, Task]:
        """The tasks this id may draw: its family's, or every task."""
        family = FAMILIES[self.family] if self.family is not None else TASKS.values()
        return {task.name: task for task in family}

    # --- episode lifecycle -------------------------------------------------------------------------

    async def setup(self, rng: random.Random) -> list[Message]:
        begun = time.monotonic()
        await self._close_desktop()
        self.drawn = self.task_name or rng.choice(sorted(self.tasks))
        self.episode = episode = self.tasks[self.drawn].build(rng)
        self.finished = False
        self.broken = None
        self.desktop = desktop = await self._take_desktop()
        if self.spare:
            self._start_next()
        for path in episode.dirs:
            await desktop.sb.exec(["mkdir", "-p", "--", path])
        for path, content in episode.files.items():
            parent = path.rsplit("/", 1)[0]
            if parent and parent != "/work":
                await desktop.sb.exec(["mkdir", "-p", "--", parent])
            await desktop.sb.write_file(path, content)
        if self.tasks[self.drawn].office:
            await install_profile(desktop)
        await desktop.launch(episode.app, window=episode.window, within=90)
        await desktop.wait_still(quiet=self.tasks[self.drawn].first_screen_quiet)
        self.reset_seconds = time.monotonic() - begun
        try:
            return [await self._observation(f"Task: {episode.goal}\n\n", first=True)]
        except DesktopBroken as exc:  # before the agent acted: the machinery's failure, not the agent's
            raise InfrastructureError(f"the desktop broke during reset: {exc}") from exc

    async def _take_desktop(self) -> Desktop:
        """The spare started during the last episode if there is one (and it started), else a new one."""
        self.used_spare = False
        task, self._next = self._next, None
        if task is not None and self._next_loop is asyncio.get_running_loop():
            with contextlib.suppress(Exception):  # a spare that failed to start: start one now instead
                desktop = await task
                self.used_spare = True
                return desktop
        return await Desktop(width=self.width, height=self.height, backend=self.backend).start()

    def _start_next(self) -> None:
        """Start the next episode's desktop in the background, with LibreOffice's prepared profile copied
        in when a task this env may draw opens LibreOffice. No app is started ahead: a resident
        LibreOffice saved only ~0.3 s and showed a half-painted window on back-to-back resets."""
        names = [self.task_name] if self.task_name else list(self.tasks)
        office = any(self.tasks[name].office for name in names)
        self._next_loop = asyncio.get_running_loop()
        self._next = asyncio.create_task(self._spare(office))

    async def _spare(self, office: bool) -> Desktop:
        desktop = await Desktop(width=self.width, height=self.height, backend=self.backend).start()
        try:
            if office:
                await install_profile(desktop)
        except BaseException:
            await desktop.close()
            raise
        return desktop

    def reset_info(self) -> dict[str, Any]:
        timings = self.desktop.timings if self.desktop is not None else None
        return {
            "task": self.drawn,
            "app": self.tasks[self.drawn].app if self.drawn else "",
            "reset_seconds": round(self.reset_seconds, 3),
            "spare": self.used_spare,
            "app_start_seconds": round(sum(timings.apps.values()), 3) if timings else 0.0,
            "window_remaps": self.desktop.remaps if self.desktop is not None else 0,
        }

    async def react(self, message: Message) -> Reaction:
        reaction = await super().react(message)
        if reaction.done or self.finished:
            return Reaction(observation=reaction.observation, done=True, info=reaction.info)
        try:
            observation = await self._observation()
        except DesktopBroken as exc:
            self.broken = str(exc)
            ended = user(f"The desktop stopped working: {exc}. The episode is over and scores 0.")
            info = {**reaction.info, "desktop_broken": self.broken}
            return Reaction(observation=[*reaction.observation, ended], done=True, info=info)
        return Reaction(observation=[*reaction.observation, observation], info=reaction.info)

    async def __fork__(self, memo: dict[int, Any]) -> DesktopEnv:
        """Refused: an app's in-memory state (an unsaved document, an open dialog) cannot be copied."""
        raise NotForkable(
            "a desktop episode cannot fork: the apps' state lives in their processes (unsaved text, open "
            "dialogs), which a copy of the files does not carry; play each branch from reset"
        )

    async def close(self) -> None:
        await self._close_desktop()
        task, self._next = self._next, None
        if task is not None and self._next_loop is asyncio.get_running_loop():
            task.cancel()
            with contextlib.suppress(BaseException):
                desktop = await task
                await desktop.close()

    async def _close_desktop(self) -> None:
        desktop, self.desktop = self.desktop, None
        if desktop is not None:
            await desktop.close()

    # --- reward: the saved file, read from the sandbox --------------------------------------------------

    @envhub.reward
    async def success(self) -> float:
        """1 when the file the app saved holds what the task asked for; never read from the pixels."""
        assert self.episode is not None and self.desktop is not None
        if self.broken is not None:  # the agent broke its own desktop: a failure, whatever the files say
            return 0.0
        files: dict[str, bytes | None] = {}
        for path in self.episode.reads:
            try:
                files[path] = await self.desktop.sb.read_file(path)
            except (FileNotFoundError, PermissionError, IsADirectoryError):
                files[path] = None
        trees = {path: await self._tree(path) for path in self.episode.trees}
        modes = {path: await self._mode(path) for path in self.episode.modes}
        return float(self.episode.check(Saved(files, trees, modes)))

    async def _mode(self, path: str) -> int | None:
        """A regular file's permission bits (find does not follow a symlink: one reads as None)."""
        assert self.desktop is not None
        found = await self.desktop.sb.exec(["find", path, "-maxdepth", "0", "-type", "f", "-printf", "%m"])
        text = found.stdout.strip()
        return int(text, 8) if found.exit_code == 0 and text.isdigit() else None

    async def _tree(self, path: str) -> frozenset[str] | None:
        """The paths under a directory, relative, directories ending in `/`; NUL-separated on the wire,
        so no file name (newlines included) can forge another entry."""
        assert self.desktop is not None
        listing = await self.desktop.sb.exec(
            [
                "find",
                path,
                "-mindepth",
                "1",
                "(",
                "-type",
                "d",
                "-printf",
                "%P/\\0",
                ")",
                "-o",
                "-printf",
                "%P\\0",
            ]
        )
        if listing.exit_code != 0 or listing.output_truncated:  # a tree too big to list fails the check
            return None
        return frozenset(entry for entry in listing.stdout.split("\0") if entry)

    @envhub.reward(weight=0.0)
    def actions(self, messages: list[Message]) -> float:
        """Recorded, not rewarded: how many desktop actions the agent took."""
        return float(sum(len(m.tool_calls) for m in messages))

    # --- tools --------------------------------------------------------------------------------------------

    @envhub.tool
    async def click(self, x: int, y: int, button: Literal["left", "middle", "right"] = "left") -> str:
        """Click a point of the screen.

        Args:
            x: Pixels from the left edge of the screen.
            y: Pixels from the top edge of the screen.
            button: Which mouse button.
        """
        return await self._do(Click(x, y, button))

    @envhub.tool
    async def double_click(self, x: int, y: int) -> str:
        """Double-click a point of the screen with the left button.

        Args:
            x: Pixels from the left edge of the screen.
            y: Pixels from the top edge of the screen.
        """
        return await self._do(Click(x, y, "left", 2))

    @envhub.tool
    async def move(self, x: int, y: int) -> str:
        """Move the pointer without clicking (menus that open on hover).

        Args:
            x: Pixels from the left edge of the screen.
            y: Pixels from the top edge of the screen.
        """
        return await self._do(MoveTo(x, y))

    @envhub.tool
    async def drag(self, from_x: int, from_y: int, to_x: int, to_y: int) -> str:
        """Press the left button at one point, move to another and release (select text, move things).

        Args:
            from_x: Where to press, pixels from the left.
            from_y: Where to press, pixels from the top.
            to_x: Where to release, pixels from the left.
            to_y: Where to release, pixels from the top.
        """
        return await self._do(Drag(to_x, to_y, from_x, from_y))

    @envhub.tool
    async def scroll(self, clicks: int, x: int | None = None, y: int | None = None) -> str:
        """Turn the mouse wheel: positive clicks scroll up, negative down; over (x, y) when given.

        Args:
            clicks: Wheel steps, -50 to 50; positive is up.
            x: Where to scroll, pixels from the left (with y).
            y: Where to scroll, pixels from the top (with x).
        """
        if not -50 <= clicks <= 50:
            raise ValueError(f"clicks must be between -50 and 50, got {clicks}")
        return await self._do(Scroll(clicks, False, x, y))

    @envhub.tool
    async def key(self, keys: str, presses: int = 1) -> str:
        """Press a key or a combination, e.g. enter, tab, ctrl+s, ctrl+shift+End, F2.

        Args:
            keys: Key names joined by +, as pyautogui or X name them.
            presses: How many times, 1 to 100.
        """
        if not 1 <= presses <= 100:
            raise ValueError(f"presses must be between 1 and 100, got {presses}")
        names = tuple(k for k in keys.split("+") if k) if keys != "+" else ("+",)
        return await self._do(Keys(names, presses))

    @envhub.tool
    async def type_text(self, text: str) -> str:
        """Type text where the keyboard focus is; a newline presses Enter.

        Args:
            text: The text to type, at most 2000 characters.
        """
        if len(text) > 2000:
            raise ValueError(f"type at most 2000 characters at a time, got {len(text)}")
        return await self._do(TypeText(text))

    @envhub.tool
    async def wait(self, seconds: float = 1.0) -> str:
        """Wait for the screen to change (an app starting, a file saving).

        Args:
            seconds: How long, 0 to 30.
        """
        return await self._do(Wait(seconds))

    @envhub.tool
    async def pyautogui(self, code: str) -> str:
        """Act with OSWorld-style pyautogui code, e.g. pyautogui.click(100, 200) or
        pyautogui.hotkey('ctrl', 's'), one call per line; or WAIT, DONE or FAIL.

        Args:
            code: The pyautogui calls (literal arguments only; nothing else runs).
        """
        parsed = parse(code)
        for action in parsed.actions:
            await self._do(action)
        if parsed.end is not None:
            self.finished = True
            return "finished" if parsed.end == "DONE" else "gave up"
        return f"did {len(parsed.actions)} action(s)"

    @envhub.tool
    async def done(self) -> str:
        """Finish the episode. Call it once the task is complete (and saved)."""
        self.finished = True
        return "finished"

    # --- the oracle ---------------------------------------------------------------------------------------

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        """The task's scripted GUI actions, one per turn, then done()."""
        assert self.episode is not None
        taken = sum(1 for m in messages if m.role == "assistant")
        steps = self.episode.oracle
        if taken >= len(steps):
            return Message(role="assistant", tool_calls=[ToolCall.create("done", {}, id=f"call_{taken}")])
        name, arguments = as_tool_call(steps[taken])
        return Message(role="assistant", tool_calls=[ToolCall.create(name, arguments, id=f"call_{taken}")])

    # --- machinery --------------------------------------------------------------------------------------

    async def _do(self, action: DesktopAction) -> str:
        for x, y in points(action):
            if not (0 <= x < self.width and 0 <= y < self.height):
                raise ValueError(f"({x}, {y}) is outside the {self.width}x{self.height} screen")
        if self.desktop is None:
            raise ValueError("no desktop is running: reset the environment first")
        async with self._lock:
            await self.desktop.act(action)
        return action.describe()

    async def _observation(self, prefix: str = "", *, first: bool = False) -> Message:
        """The screen after the last action: the window list and a screenshot, as one user message.
        The first one shows the frame the reset's still-screen wait settled on, so two resets of one
        seed show the same picture even where a caret blinks."""
        assert self.desktop is not None
        if self.settle and not first:
            await asyncio.sleep(self.settle)
        windows = await self.desktop.windows()
        parts: list[TextPart | ImagePart] = [TextPart(text=f"{prefix}Windows:\n{windows or '(none)'}")]
        if self.screenshot:
            parts.append(ImagePart(data=await self.desktop.screenshot(settled=first)))
        return user(list(parts))


def as_tool_call(action: DesktopAction) -> tuple[str, dict[str, Any]]:
    """The tool call that does `action`: how the oracle plays through the agent's own tools."""
    if isinstance(action, Keys):
        return "key", {"keys": "+".join(action.keys), "presses": action.presses}
    if isinstance(action, TypeText):
        return "type_text", {"text": action.text}
    if isinstance(action, Wait):
        return "wait", {"seconds": action.seconds}
    if isinstance(action, Click):
        name = "double_click" if action.count == 2 else "click"
        return name, {
            "x": action.x,
            "y": action.y,
            **({"button": action.button} if action.count == 1 else {}),
        }
    if isinstance(action, MoveTo):
        return "move", {"x": action.x, "y": action.y}
    if isinstance(action, Drag):
        return "drag", {
            "from_x": action.from_x,
            "from_y": action.from_y,
            "to_x": action.to_x,
            "to_y": action.to_y,
        }
    if isinstance(action, Scroll):
        return "scroll", {"clicks": action.clicks, "x": action.x, "y": action.y}
    raise TypeError(f"no tool plays {action!r}; use the pyautogui tool for it")


class EditorDesktopEnv(DesktopEnv):
    """`desktop-editor-v0`: the text-editor tasks (Mousepad)."""

    family = "editor"


class CalcDesktopEnv(DesktopEnv):
    """`desktop-calc-v0`: the spreadsheet tasks (LibreOffice Calc)."""

    family = "calc"


class TerminalDesktopEnv(DesktopEnv):
    """`desktop-terminal-v0`: the terminal tasks (xterm)."""

    family = "terminal"


class FilesDesktopEnv(DesktopEnv):
    """`desktop-files-v0`: the file-manager tasks (PCManFM)."""

    family = "files"


class WriterDesktopEnv(DesktopEnv):
    """`desktop-writer-v0`: the word-processor tasks (LibreOffice Writer)."""

    family = "writer"
