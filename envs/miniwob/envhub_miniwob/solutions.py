"""Scripted reference solutions: for each task, the next browser action, read from the page as it is.

A solution is a function of the `Snapshot` (utterance, miniwob's fields, visible elements) returning the
next tool call, or None when there is nothing left to do. Solutions read the current page rather than
count steps, so they pick up where the page is after any action. They act as an agent could: through
the same tools, on what the page shows; they never touch the page's scripts or its reward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envhub_miniwob.page import Node, Snapshot

Call = tuple[str, dict[str, Any]]
Solution = Callable[[Snapshot], Call | None]
SOLUTIONS: dict[str, Solution] = {}


def solution(*names: str) -> Callable[[Solution], Solution]:
    """Register a scripted solution for one or more tasks."""

    def register(solve: Solution) -> Solution:
        for name in names:
            SOLUTIONS[name] = solve
        return solve

    return register


def next_call(solve: Solution, page: Snapshot) -> Call:
    """The solution's next call; done() once it has nothing left (the page normally ends first)."""
    return solve(page) or ("done", {"answer": ""})


def click(node: Node) -> Call:
    """Click by the text view's id where it lists the element, else at the element's centre."""
    if node.eid:
        return ("click", {"element": node.eid})
    x, y = node.centre
    return ("click_at", {"x": x, "y": y})


def type_into(node: Node, text: str) -> Call:
    return ("type", {"text": text, "element": node.eid})


# --- click tasks ---------------------------------------------------------------------------------------


@solution("click-test", "click-test-transfer")
def click_test(page: Snapshot) -> Call | None:
    return click(page.one("button"))


def between(text: str, start: str, end: str) -> str:
    """The part of `text` after `start` and before the next `end`."""
    _, found, rest = text.partition(start)
    if not found:
        raise LookupError(f"{start!r} is not in {text!r}")
    return rest.split(end, 1)[0]


def fill_then_submit(page: Snapshot, values: dict[str, str], submit: Node) -> Call:
    """Type each value into its field (by DOM id) where it is not there yet, then press `submit`."""
    for dom_id, value in values.items():
        field = page.by_id(dom_id)
        if field.value != value:
            return type_into(field, value)
    return click(submit)


@solution("click-test-2")
def click_test_2(page: Snapshot) -> Call:
    return click(page.one("button", text=between(page.utterance, "Click button ", ".")))


@solution("click-button-sequence")
def click_button_sequence(page: Snapshot) -> Call:
    return click(page.by_id("subbtn" if page.step == 0 else "subbtn2"))


@solution("click-button", "unicode-test")
def click_button(page: Snapshot) -> Call:
    return click(page.one("button", text=page.quoted()[0]))


@solution("click-link")
def click_link(page: Snapshot) -> Call:
    return click(page.one("span", text=page.quoted()[0], cls="alink"))


@solution("click-dialog")
def click_dialog(page: Snapshot) -> Call:
    return click(page.one("button", cls="ui-dialog-titlebar-close"))


@solution("click-dialog-2")
def click_dialog_2(page: Snapshot) -> Call:
    label = page.quoted()[0]
    if label == "x":
        return click(page.one("button", cls="ui-dialog-titlebar-close"))
    return click(page.one("button", text=label))


@solution("click-checkboxes", "click-checkboxes-large", "click-checkboxes-transfer")
def click_checkboxes(page: Snapshot) -> Call:
    """Tick exactly the named boxes, then submit."""
    named = between(page.utterance, "Select ", " and click Submit").split(", ")
    wanted = set() if named == ["nothing"] else set(named)
    for label in page.find("label"):
        (box,) = (n for n in page.nodes if n.tag == "input" and n.type == "checkbox" and _inside(n, label))
        if box.checked != (label.text in wanted):
            return click(box)
    return click(page.by_id("subbtn"))


def _inside(node: Node, outer: Node) -> bool:
    return (
        outer.x <= node.x + node.w / 2 <= outer.x + outer.w
        and outer.y <= node.y + node.h / 2 <= outer.y + outer.h
    )


@solution("click-option")
def click_option(page: Snapshot) -> Call:
    label = page.one("label", text=between(page.utterance, "Select ", " and click Submit"))
    (radio,) = (n for n in page.nodes if n.tag == "input" and n.type == "radio" and _inside(n, label))
    return click(page.by_id("subbtn")) if radio.checked else click(radio)


@solution("click-tab")
def click_tab(page: Snapshot) -> Call:
    return click(page.one("a", text=between(page.utterance, "Click on ", ".")))


@solution("click-widget")
def click_widget(page: Snapshot) -> Call:
    kind = page.quoted()[0]
    return click(next(n for n in page.nodes if n.data.get("type") == kind))


@solution("click-color")
def click_color(page: Snapshot) -> Call:
    colour = between(page.utterance, "Click on the ", " colored box")
    return click(next(n for n in page.nodes if n.data.get("color") == colour))


@solution("click-collapsible", "click-collapsible-nodelay")
def click_collapsible(page: Snapshot) -> Call:
    """Open the section (its panel becomes visible), then submit."""
    if page.find(cls="ui-accordion-content"):
        return click(page.by_id("subbtn"))
    return click(page.one("h3"))


@solution("focus-text")
def focus_text(page: Snapshot) -> Call:
    return click(page.by_id("tt"))


@solution("focus-text-2")
def focus_text_2(page: Snapshot) -> Call:
    nth = between(page.utterance, "Focus into the ", " input")
    return click(page.by_id("tt" + nth[0]))


@solution("enter-text")
def enter_text(page: Snapshot) -> Call:
    return fill_then_submit(page, {"tt": page.quoted()[0]}, page.by_id("subbtn"))


@solution("enter-text-2")
def enter_text_2(page: Snapshot) -> Call:
    word = page.quoted()[0]
    text = word.upper() if "upper case" in page.utterance else word.lower()
    return fill_then_submit(page, {"tt": text}, page.by_id("subbtn"))


@solution("enter-password")
def enter_password(page: Snapshot) -> Call:
    password = page.quoted()[0]
    return fill_then_submit(page, {"password": password, "verify": password}, page.by_id("subbtn"))


@solution("login-user")
def login_user(page: Snapshot) -> Call:
    user, password = page.quoted()[:2]
    return fill_then_submit(page, {"username": user, "password": password}, page.by_id("subbtn"))


@solution("choose-list")
def choose_list(page: Snapshot) -> Call:
    wanted = between(page.utterance, "Select ", " from the list")
    menu = page.by_id("options")
    if menu.value != wanted:
        return ("select", {"element": menu.eid, "option": wanted})
    return click(page.one("button", text="Submit"))


@solution("simple-arithmetic")
def simple_arithmetic(page: Snapshot) -> Call:
    a, op, b = page.by_id("math-problem").text.rstrip("= ").split()
    answer = {"+": int(a) + int(b), "-": int(a) - int(b), "x": int(a) * int(b)}[op]
    return fill_then_submit(page, {"math-answer": str(answer)}, page.by_id("subbtn"))


@solution("simple-algebra")
def simple_algebra(page: Snapshot) -> Call:
    left, right = page.by_id("math-problem").text.split("=")
    a, op, b = left.split()
    total = int(right)
    if a == "x":  # x + d = m, x - d = m
        answer = total - int(b) if op == "+" else total + int(b)
    else:  # d + x = m, d - x = m
        answer = total - int(a) if op == "+" else int(a) - total
    return fill_then_submit(page, {"math-answer": str(answer)}, page.by_id("subbtn"))
