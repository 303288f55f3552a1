"""What a forked web task carries, and how a child's page is brought to its parent's (`Env.fork`).

A page's DOM, its scripts' memory and its timers live in the browser's renderer and cannot be copied.
What can be, is: the context's storage (cookies, localStorage) and the URL. So a child gets a new
browser context (in the same browser) opened with its parent's storage state as it was when the
parent's current document was asked for, loads that document from the URL it was loaded from by GET,
and then replays the actions the agent took on it since (form fills, clicks, scrolls), observing
between turns as the parent did so that element ids come out the same. What those actions wrote to
storage is written again by the replay: that is why the storage is taken before them, not after.

A document reached by a POST (a form sent) is reached by replaying from the last GET-loaded document,
the sending included. The site's server state (`Site.log`, which handlers keep through `Request.log`)
goes the same way as the storage: the child's own server starts from a copy of it as it was when the
document was asked for, and the replay's requests bring it to the parent's. The child's text view must
then equal the parent's last one, or the fork fails saying where.

Not carried: sessionStorage, IndexedDB and scripts' memory except as the replayed actions rebuild them,
timers, the back button's history before the current document, and a page's randomness or clock (a
replay that comes out different fails the fork rather than start a child elsewhere).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from envhub.messages import ToolCall


@dataclass(frozen=True)
class LoggedAction:
    """A browser tool call the agent made, in the turn it made it: what a child replays."""

    turn: int
    call: ToolCall


@dataclass(frozen=True)
class Anchor:
    """The document a fork reopens: loaded by GET from `url` once `actions` calls were logged, in
    turn `turn` (0: the start page); the logged actions after it are the ones replayed on it.

    `storage` is the context's storage state when the document was asked for, before its scripts ran:
    a child opens with it and the replay writes the rest again, so nothing is applied twice (None:
    not taken, and the fork uses the storage as it is now)."""

    url: str
    actions: int
    turn: int
    storage: Any = None
    server_log: dict[str, Any] = field(default_factory=dict)
    """The site's server state (`Site.log`) when the document was asked for, for the same reason."""


@dataclass
class BrowserUsers:
    """How many envs of a fork family use one browser: the last to close it stops it."""

    count: int = 1


def moved(url: str, old_origin: str, new_origin: str) -> str:
    """`url` on the child's origin when it was on the parent's (a child serves its site on its own port)."""
    if old_origin and url.startswith(old_origin):
        return new_origin + url[len(old_origin) :]
    return url


def moved_state(state: Any, old_origin: str, new_origin: str) -> Any:
    """A context's storage state with the parent's origin's localStorage put under the child's.

    Cookies name a host, not a port, so they apply as they are."""
    origins = [{**o, "origin": moved(o["origin"], old_origin, new_origin)} for o in state.get("origins", [])]
    return {**state, "origins": origins}


def moved_call(call: ToolCall, old_origin: str, new_origin: str) -> ToolCall:
    """A navigate() to a full URL of the parent's site, aimed at the child's; any other call as it is."""
    if call.name != "navigate" or old_origin == new_origin:
        return call
    try:
        arguments = json.loads(call.arguments)
        arguments["url"] = moved(str(arguments["url"]), old_origin, new_origin)
    except (ValueError, TypeError, KeyError):
        return call  # malformed: replayed as malformed, as the parent got it
    return call.model_copy(update={"arguments": json.dumps(arguments)})


def first_difference(parent: str, child: str) -> str:
    """The first line where two text views differ, for the error that says the fork failed."""
    ours, theirs = parent.splitlines(), child.splitlines()
    for number, (a, b) in enumerate(zip(ours, theirs, strict=False), start=1):
        if a != b:
            return f"line {number}: the parent's {a!r}, the child's {b!r}"
    return f"the parent's view has {len(ours)} lines, the child's {len(theirs)}"
