"""Forking a web task in a real headless Chromium (issue 21): a child starts on its parent's page (the
same text view: DOM state rebuilt by replaying the actions on the current document, cookies and
localStorage carried), then each branch goes its own way and is graded on its own page."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest
from envhub_browser import TASKS, WebTasks
from envhub_browser.browser import chromium_path, chromium_pids
from envhub_browser.site import Request, Response, Site, document
from envhub_browser.tasks import WebTask

import envhub
from envhub.messages import Message, ToolCall

pytestmark = pytest.mark.skipif(
    chromium_path() is None and os.environ.get("ENVHUB_CHROMIUM") != "playwright",
    reason="no Chromium: install Debian's `chromium` (CI does) or set ENVHUB_CHROMIUM",
)


def make(task: str, **kwargs: Any) -> WebTasks:
    return WebTasks(task=task, screenshot=False, **kwargs)


def call(name: str, **arguments: object) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, dict(arguments))])


def eid(env: WebTasks, dom_id: str) -> int:
    """The id the agent sees for the element with this DOM id, from the latest view."""
    return env.elements[dom_id].eid


async def fresh_view(env: WebTasks) -> str:
    return (await env._observation()).text


async def test_a_child_starts_on_the_parents_form_and_each_branch_is_graded_alone() -> None:
    """fill-form, two fields filled (DOM state only): both children show them; one fills the third and
    sends the form (1.0), the other sends it without (0.0), and neither's typing reaches the others."""
    env = make("fill-form")
    children: list[WebTasks] = []
    try:
        await env.reset(seed=5)
        fills = [step for step in TASKS["fill-form"].build(random.Random(5)).oracle if not callable(step)]
        for name, arguments in fills[:2]:  # name and email, one turn each
            await env.step(call(name, **{**arguments, "element": eid(env, arguments["element"][1:])}))
        at_fork = env.view
        children = await env.fork(2)
        finishes, skips = children
        for child in children:
            assert await fresh_view(child) == at_fork  # the same page, filled fields included
        age = fills[2][1]["text"]
        await finishes.step(call("type", element=eid(finishes, "age"), text=age))
        await finishes.step(call("click", element=eid(finishes, "submit")))
        await skips.step(call("click", element=eid(skips, "submit")))
        assert (await finishes.step(call("done"))).reward == 1.0
        assert (await skips.step(call("done"))).reward == 0.0
        assert f'value="{age}"' in finishes.view
        assert f'value="{age}"' not in skips.view and "Submitted." in skips.view
        parent_now = await fresh_view(env)
        assert parent_now == at_fork and "Submitted." not in parent_now
        assert len(chromium_pids(env.browser_tag)) == 1  # the children used the parent's browser
    finally:
        for e in (*children, env):
            await e.close()


async def test_a_login_cookie_and_a_form_sent_by_post_are_carried_and_kept_apart() -> None:
    """login: forked once logged in (the session cookie, a page reached by POST and a redirect), the
    child is on the account page too; forked before, one child logs in and the other is not let in."""
    env = make("login")
    children: list[WebTasks] = []
    try:
        await env.reset(seed=2)
        _, (_, user), (_, password), _ = TASKS["login"].build(random.Random(2)).oracle  # type: ignore[misc]
        await env.step(call("click", element=eid(env, "to-login")))
        await env.step(call("type", element=eid(env, "user"), text=user["text"]))
        children = await env.fork(2)
        logs_in, stays_out = children
        await logs_in.step(call("type", element=eid(logs_in, "password"), text=password["text"]))
        await logs_in.step(call("click", element=eid(logs_in, "login")))
        await stays_out.step(call("navigate", url="/account"))
        assert "Welcome" in logs_in.view and "Please log in" in stays_out.view
        assert (await logs_in.step(call("done"))).reward == 1.0
        assert (await stays_out.step(call("done"))).reward == 0.0
        assert not [c for c in await env.context.cookies() if c["name"] == "session"]  # type: ignore[union-attr]

        await env.step(call("type", element=eid(env, "password"), text=password["text"]))
        await env.step(call("click", element=eid(env, "login")))
        (again,) = await env.fork(1)
        children.append(again)
        assert again.view == env.view and "Welcome" in again.view
        assert [c["name"] for c in await again.context.cookies()] == ["session"]  # type: ignore[union-attr]
        assert (await again.step(call("done"))).reward == 1.0
    finally:
        for e in (*children, env):
            await e.close()


def counter_site(rng: random.Random) -> Site:
    """A count kept in localStorage and in the page script's memory, bumped by a button."""
    script = """
    let clicks = 0;
    function render() {
      document.getElementById('shown').textContent =
        `stored ${localStorage.getItem('n') || 0}, this page ${clicks}`;
    }
    function bump() {
      clicks++; const n = Number(localStorage.getItem('n') || 0) + 1;
      localStorage.setItem('n', n); record('n', n); render();
    }
    render();"""
    body = (
        "<button id='bump' onclick='bump()'>Bump</button><p id='shown'></p><a id='again' href='/'>Again</a>"
    )
    return Site(
        goal="Bump the count to 4.",
        pages={"/": document("Counter", body, script)},
        check=lambda o: o.state.get("n") == 4,
        oracle=[],
    )


async def test_local_storage_is_carried_once_and_script_memory_rebuilt_by_the_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two bumps, a reload, one more: the child shows stored 3 and this page 1, as the parent does
    (storage as the document was asked for, then the bump replayed: not stored 4); a child's bump
    stays in that child's storage."""
    monkeypatch.setitem(TASKS, "test-counter", WebTask("test-counter", 1, counter_site))
    env = make("test-counter")
    children: list[WebTasks] = []
    try:
        await env.reset(seed=0)
        for dom_id in ("bump", "bump", "again", "bump"):
            await env.step(call("click", element=eid(env, dom_id)))
        assert "stored 3, this page 1" in env.view
        children = await env.fork(2)
        bumps, waits = children
        assert bumps.view == waits.view == env.view
        await bumps.step(call("click", element=eid(bumps, "bump")))
        assert "stored 4, this page 2" in bumps.view
        assert (await bumps.step(call("done"))).reward == 1.0
        assert (await waits.step(call("done"))).reward == 0.0
        assert await env.page.evaluate("() => localStorage.getItem('n')") == "3"  # type: ignore[union-attr]
    finally:
        for e in (*children, env):
            await e.close()


async def test_a_page_the_replay_cannot_rebuild_fails_the_fork_saying_where(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page that draws a random number each load cannot be brought back by a reload and a replay:
    the fork fails, naming the differing line, rather than start a child on another page; the family's
    browser is still the parent's to use."""

    def dice(rng: random.Random) -> Site:
        script = "document.getElementById('roll').textContent = Math.random();"
        return Site(
            goal="Roll.", pages={"/": document("Dice", "<p id='roll'></p>", script)}, check=bool, oracle=[]
        )

    monkeypatch.setitem(TASKS, "test-dice", WebTask("test-dice", 1, dice))
    env = make("test-dice")
    try:
        await env.reset(seed=0)
        with pytest.raises(envhub.NotForkable, match=r"differs.*line 3.*play each branch from reset"):
            await env.fork(1)
        assert await fresh_view(env) == env.view
        assert env.browser is not None and env.browser.is_connected()
    finally:
        await env.close()


def vote_site(rng: random.Random) -> Site:
    """Votes sent by POST and counted by the server (`Site.log`), the page then showing the count."""
    button = "<form method='post' action='/'><button id='vote' type='submit'>Vote</button></form>"

    def page(request: Request) -> Response | str:
        votes = request.log["votes"] = request.log.get("votes", 0) + (request.method == "POST")
        return document("Votes", f"<p>votes: {votes}</p>{button}")

    return Site(goal="Vote twice.", pages={"/": page}, check=lambda o: o.server.get("votes") == 2, oracle=[])


async def test_server_state_is_copied_not_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vote sent by POST, counted by the site's server: the child's own server starts from the count
    before the page was asked for and the replay sends the vote again, so it shows 1, as the parent does
    (not 2); a child's next vote counts in its own server only."""
    monkeypatch.setitem(TASKS, "test-votes", WebTask("test-votes", 1, vote_site))
    env = make("test-votes")
    children: list[WebTasks] = []
    try:
        await env.reset(seed=0)
        await env.step(call("click", element=eid(env, "vote")))
        assert "votes: 1" in env.view
        children = await env.fork(2)
        votes, waits = children
        assert votes.view == env.view and votes.site.log == {"votes": 1}  # type: ignore[union-attr]
        await votes.step(call("click", element=eid(votes, "vote")))
        assert "votes: 2" in votes.view
        assert (await votes.step(call("done"))).reward == 1.0
        assert (await waits.step(call("done"))).reward == 0.0
        assert env.site is not None and env.site.log == {"votes": 1}
    finally:
        for e in (*children, env):
            await e.close()
