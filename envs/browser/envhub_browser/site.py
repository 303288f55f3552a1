"""What a web task is made of: the pages of one small site, the goal, the grader and the oracle's plan.

A task draws a `Site` from a seed. The site is served from loopback for one episode; the grader reads the
page's own state at the end (`window.__envhub_state`, the URL, what the server saw), never the agent's claim,
except for tasks whose goal is to report a value, where the answer is checked against `Site.answer`.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    form: dict[str, str]
    cookies: dict[str, str]
    log: dict[str, Any] = field(default_factory=dict)
    """The site's `log`: where a handler keeps what the server records (the grader reads it as
    `Outcome.server`). Keep server state here, not in a handler's own variables, which a forked
    episode's site would share with its parent's."""


@dataclass(frozen=True)
class Response:
    body: str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Response | str]


@dataclass(frozen=True)
class Element:
    """Where an element with a DOM `id` sits, and the envhub id the agent knows it by (0: not clickable)."""

    eid: int
    x: float
    y: float
    width: float
    height: float

    @property
    def centre(self) -> tuple[int, int]:
        return round(self.x + self.width / 2), round(self.y + self.height / 2)


@dataclass(frozen=True)
class Outcome:
    """Everything a grader may look at when the episode ends."""

    path: str
    """The current page's path and query, e.g. `/dept/garden/hours`."""
    state: dict[str, Any]
    """`window.__envhub_state` of the current page: what the page recorded the user doing."""
    answer: str
    """The agent's `done(answer)`, or its final reply."""
    server: dict[str, Any]
    """What the site's server handlers recorded (`Site.log`)."""


Step = tuple[str, dict[str, Any]] | Callable[[dict[str, Element]], tuple[str, dict[str, Any]]]
"""One oracle action: a tool name and arguments, where `element="#dom-id"` is resolved to the element's
envhub id; or a function of the current page's elements (by DOM id) for coordinates."""


@dataclass
class Site:
    """One episode's web site and the task on it."""

    goal: str
    pages: dict[str, str | Handler]
    check: Callable[[Outcome], bool]
    oracle: list[Step]
    start: str = "/"
    answer: str | None = None
    """The expected answer for tasks that ask for a value; None when success is read from the page."""
    log: dict[str, Any] = field(default_factory=dict)

    def handle(self, request: Request) -> Response:
        page = self.pages.get(request.path)
        if page is None:
            return Response(document("Not found", "<h1>Not found</h1>"), status=404)
        if isinstance(page, str):
            return Response(page)
        out = page(request)
        return Response(out) if isinstance(out, str) else out


STYLE = """
body { font: 15px/1.4 sans-serif; margin: 12px; color: #222; }
button, input, select, textarea { font: inherit; margin: 3px; }
table { border-collapse: collapse; } td, th { border: 1px solid #bbb; padding: 2px 8px; }
nav a { margin-right: 12px; } .status { color: #060; }
"""

STATE_SCRIPT = """
window.__envhub_state = window.__envhub_state || {};
function record(key, value) { window.__envhub_state[key] = value; }
function submitForm(form) {
  const data = {};
  new FormData(form).forEach((value, key) => {
    data[key] = key in data ? [].concat(data[key], value) : value;
  });
  record("submitted", data);
  const status = form.querySelector(".status");
  if (status) status.textContent = "Submitted.";
  return false;
}
"""


def document(title: str, body: str, script: str = "", state: dict[str, Any] | None = None) -> str:
    """A whole page: the shared style and state helpers, an optional initial state, then `body`."""
    initial = f"window.__envhub_state = {json.dumps(state)};" if state is not None else ""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{STYLE}</style><script>{initial}{STATE_SCRIPT}</script></head>"
        f"<body>{body}<script>{script}</script></body></html>"
    )


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)
