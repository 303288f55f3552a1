"""OSWorld's pyautogui strings become desktop actions by parsing alone; anything else is refused by name."""

from __future__ import annotations

import re

import pytest
from envhub_desktop.actions import (
    Click,
    Drag,
    KeyHold,
    Keys,
    MouseButton,
    MoveTo,
    Scroll,
    TypeText,
    Wait,
    commands,
)
from envhub_desktop.pyautogui import parse


@pytest.mark.parametrize(
    ("code", "actions"),
    [
        ("pyautogui.click(100, 200)", [Click(100, 200)]),
        ("pyautogui.click(x=5, y=6, button='right')", [Click(5, 6, "right")]),
        ("pyautogui.click((7, 8))", [Click(7, 8)]),
        ("pyautogui.click()", [Click()]),
        ("pyautogui.doubleClick(10, 20)", [Click(10, 20, "left", 2)]),
        ("pyautogui.rightClick(1, 2)", [Click(1, 2, "right")]),
        ("pyautogui.moveTo(30, 40, duration=0.5)", [MoveTo(30, 40)]),
        ("pyautogui.dragTo(50, 60, duration=1)", [Drag(50, 60)]),
        (
            "pyautogui.mouseDown(); pyautogui.mouseUp(button='right')",
            [MouseButton(True), MouseButton(False, "right")],
        ),
        ("pyautogui.scroll(-3)", [Scroll(-3)]),
        ("pyautogui.hscroll(2, x=10, y=10)", [Scroll(2, True, 10, 10)]),
        ("pyautogui.typewrite('hi there', interval=0.05)", [TypeText("hi there")]),
        ("pyautogui.write('a\\nb')", [TypeText("a\nb")]),
        ("pyautogui.typewrite(['a', 'enter'])", [Keys(("a",)), Keys(("enter",))]),
        ("pyautogui.press('enter')", [Keys(("enter",))]),
        ("pyautogui.press(['down', 'tab'], presses=2)", [Keys(("down",), 2), Keys(("tab",), 2)]),
        ("pyautogui.hotkey('ctrl', 's')", [Keys(("ctrl", "s"))]),
        ("pyautogui.hotkey(['ctrl', 'shift', 'End'])", [Keys(("ctrl", "shift", "End"))]),
        (
            "pyautogui.keyDown('shift'); pyautogui.keyUp('shift')",
            [KeyHold("shift", True), KeyHold("shift", False)],
        ),
        (
            "import pyautogui\nimport time\npyautogui.click(1, 1)\ntime.sleep(0.5)\npyautogui.press('tab')",
            [Click(1, 1), Wait(0.5), Keys(("tab",))],
        ),
        ("WAIT", [Wait(1.0)]),
    ],
)
def test_a_supported_string_becomes_actions(code: str, actions: list[object]) -> None:
    assert list(parse(code).actions) == actions


def test_done_and_fail_end_the_episode_without_an_action() -> None:
    assert parse("DONE").end == "DONE" and not parse("DONE").actions
    assert parse(" FAIL\n").end == "FAIL"
    assert parse("pyautogui.click(1, 1)").end is None


@pytest.mark.parametrize(
    ("code", "named"),
    [
        ("import os", "import os"),
        ("import pyautogui as p", "import pyautogui"),
        ("from pyautogui import click", "ImportFrom"),
        ("x = 1", "Assign"),
        ("for i in range(3): pyautogui.click(1, 1)", "For"),
        ("os.system('curl example.com')", "os.system()"),
        ("__import__('os').system('id')", "is not supported"),
        ("eval('1')", "eval()"),
        ("pyautogui.locateOnScreen('button.png')", "pyautogui.locateOnScreen()"),
        ("pyautogui.screenshot()", "pyautogui.screenshot()"),
        ("pyautogui.click(x, 2)", "literal values"),
        ("pyautogui.click(1 + open('/etc/passwd').read(), 2)", "literal values"),
        ("pyautogui.click(1, 2, foo=3)", "'foo'"),
        ("pyautogui.click(1, 2, **kw)", "**arguments"),
        ("pyautogui.click(1, 2, 3, 4, 'left', 6)", "at most 5 positional"),
        ("pyautogui.click(1)", "both x and y"),
        ("pyautogui.click('a', 'b')", "must be numbers"),
        ("pyautogui.click(1, 2, button='side')", "button must be"),
        ("pyautogui.press('no such key')", "unknown key"),
        ("pyautogui.press('--window')", "unknown key"),
        ("pyautogui.scroll(1000)", "between -100 and 100"),
        ("time.sleep(3600)", "between 0 and 30"),
        ("pyautogui.click(1, 2", "not valid Python"),
    ],
)
def test_anything_else_is_refused_naming_it(code: str, named: str) -> None:
    """UnsupportedAction for what the parser refuses, ValueError from the action for a bad value."""
    with pytest.raises(ValueError, match=re.escape(named)):
        parse(code)


def test_text_with_newlines_types_each_line_and_presses_return_between() -> None:
    """xdotool's `type` sends a newline as Linefeed, which GTK ignores; the text is split instead."""
    runs = commands(TypeText("one\n\ntwo\n"))
    typed = [run[-1] for run in runs if run[1] == "type"]
    returns = [run for run in runs if run[1] == "key"]
    assert typed == ["one", "two"] and len(returns) == 3


def test_an_argument_that_looks_like_an_option_stays_text() -> None:
    """Typed text follows `--`, and key names must be keysyms, so nothing the agent writes is an option."""
    assert commands(TypeText("--help"))[0][-2:] == ["--", "--help"]
