"""The MiniWoB++ tasks as the `miniwob` package lists them, and where its pages lie inside the wheel.

The list is read from miniwob's own gymnasium registrations (`miniwob/<task>-v1`), so a new miniwob
release that adds a task shows up here unchanged; `tools/gen_entry_points.py` writes the matching entry
points into pyproject.toml.
"""

from __future__ import annotations

import functools
import importlib
import re
from dataclasses import dataclass
from pathlib import Path

import miniwob  # type: ignore[import-untyped]
from miniwob.constants import (  # type: ignore[import-untyped]
    FLIGHT_WINDOW_HEIGHT,
    FLIGHT_WINDOW_WIDTH,
    WINDOW_HEIGHT,
    WINDOW_WIDTH,
)

HTML_DIR = Path(miniwob.__file__).parent / "html"
"""The task pages, scripts, styles and images that ship inside the miniwob wheel."""
VERSION = miniwob.__version__


@dataclass(frozen=True)
class MiniWoBTaskInfo:
    """One MiniWoB++ task: its name (miniwob's `subdomain`), its page and its one-line description."""

    name: str
    description: str
    nondeterministic: bool

    @property
    def flight(self) -> bool:
        """FlightWoB tasks: a real airline site in an iframe, in a bigger window."""
        return self.name.startswith("flight.")

    @property
    def path(self) -> str:
        """The page's path under the html folder, as miniwob's SeleniumInstance builds its URL."""
        if self.flight:
            return self.name.replace(".", "/") + "/wrapper.html"
        return f"miniwob/{self.name}.html"

    @property
    def window(self) -> tuple[int, int]:
        """The browser window miniwob uses for the task (width, height)."""
        if self.flight:
            return FLIGHT_WINDOW_WIDTH, FLIGHT_WINDOW_HEIGHT
        return WINDOW_WIDTH, WINDOW_HEIGHT


def _description(doc: str | None) -> str:
    """The first sentence under `## Description` in a miniwob env class's docstring."""
    found = re.search(r"## Description\s+(.+?)(?:\n\s*\n|$)", doc or "", re.DOTALL)
    return " ".join(found.group(1).split()) if found else ""


@functools.cache
def tasks() -> dict[str, MiniWoBTaskInfo]:
    """Every task miniwob registers with gymnasium, by name, in its registration order."""
    import gymnasium

    found: dict[str, MiniWoBTaskInfo] = {}
    for spec in gymnasium.registry.values():
        entry_point = spec.entry_point
        if not (isinstance(entry_point, str) and entry_point.startswith("miniwob.envs.")):
            continue  # only miniwob's own registrations (envhub registers its ids with gymnasium too)
        module_name, _, attr = entry_point.partition(":")
        env_class = getattr(importlib.import_module(module_name), attr)
        name = env_class.subdomain
        found[name] = MiniWoBTaskInfo(name, _description(env_class.__doc__), bool(spec.nondeterministic))
    return found


def attribute_name(task: str) -> str:
    """The Python name of a task's entry point in `envhub_miniwob.tasks`: `click-test` -> `click_test`."""
    return re.sub(r"\W", "_", task)
