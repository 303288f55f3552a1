"""What a desktop task is: a seeded starting state, the app to open, a checker of what the apps leave,
and an oracle that drives the real GUI.

Each task's `build(rng)` draws one episode. The checker reads only what the apps leave in the sandbox
(saved files and directory trees, never pixels); the oracle is the list of GUI actions (keyboard first)
that a person would take, played by the env through the same xdotool path as the agent's own actions.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from envhub_desktop.actions import DesktopAction

WORDS = [
    *("apple", "river", "stone", "cloud", "maple", "copper", "lantern", "meadow", "harbor", "violet"),
    *("falcon", "summit", "ember", "willow", "canyon", "orbit", "pepper", "quartz", "saddle", "timber"),
]


FIRST_SCREEN_QUIET = 0.5
OFFICE_FIRST_SCREEN_QUIET = 2.0


@dataclass(frozen=True)
class Saved:
    """What a checker may read after the episode: the files and directory trees the apps left."""

    files: Mapping[str, bytes | None]
    """Each of the episode's `reads`: its bytes, or None when it is missing or not a regular file."""
    trees: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    """Each of the episode's `trees`: the paths under it, relative, directories ending in `/` (None when
    the directory is missing)."""
    modes: Mapping[str, int | None] = field(default_factory=dict)
    """Each of the episode's `modes`: its permission bits (0o755), or None when it is missing or not a
    regular file."""

    def text(self, path: str) -> str | None:
        """The file as UTF-8 text, or None when it is missing or not text."""
        data = self.files.get(path)
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError:
            return None


Check = Callable[[Saved], bool]


@dataclass(frozen=True)
class Episode:
    """One drawn task: what the agent is told, the files it starts with, and how it is judged."""

    goal: str
    files: Mapping[str, str | bytes]
    """Sandbox path -> content, written before the app starts (parent directories are made)."""
    app: list[str]
    """The app's command line, started on the desktop."""
    window: str
    """A regex of the app's window title: the episode starts once it shows."""
    reads: tuple[str, ...]
    """The files the checker reads after the episode."""
    check: Check
    oracle: list[DesktopAction] = field(default_factory=list)
    trees: tuple[str, ...] = ()
    """Directories whose trees the checker reads (the file manager's and the terminal's tasks)."""
    dirs: tuple[str, ...] = ()
    """Empty directories made before the app starts."""
    modes: tuple[str, ...] = ()
    """Files whose permission bits the checker reads (the terminal's chmod task)."""


@dataclass(frozen=True)
class Task:
    name: str
    app: str
    """The Debian program the task is played in (mousepad, libreoffice-calc, xterm, ...)."""
    summary: str
    build: Callable[[random.Random], Episode]

    @property
    def office(self) -> bool:
        """Whether the app is LibreOffice, which wants the prepared profile (`envhub_desktop.office`)."""
        return self.app.startswith("libreoffice")

    @property
    def first_screen_quiet(self) -> float:
        """How long the screen must stay unchanged before the first observation, in seconds. LibreOffice
        maps a document's window before it has loaded and painted it, and under load (8 on 2 cores) a
        window stayed grey for over 0.5 s (1 reset in 8: two resets of one seed then showed different
        first screens, failing `envhub check`); 2 s of stillness held in every reset tried since."""
        return OFFICE_FIRST_SCREEN_QUIET if self.office else FIRST_SCREEN_QUIET


def word_lines(rng: random.Random, n: int) -> list[str]:
    """`n` lines of three distinct words each."""
    return [" ".join(rng.sample(WORDS, 3)) for _ in range(n)]


def text_is(expected: list[str], path: str) -> Check:
    """The file holds exactly these lines (one trailing newline or none: editors differ)."""

    def check(saved: Saved) -> bool:
        text = saved.text(path)
        return text is not None and text.removesuffix("\n").split("\n") == expected

    return check
