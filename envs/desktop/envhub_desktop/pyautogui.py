"""OSWorld's `pyautogui` action strings, read as data: `ast` parses them, nothing is ever evaluated.

An agent written for OSWorld answers with Python such as `pyautogui.click(100, 200)` or several such
lines (with `import pyautogui`, `time.sleep(0.5)`), or one of the words WAIT, DONE, FAIL. This module
accepts exactly that subset: imports of pyautogui and time, and calls of the functions below whose
arguments are literals. Anything else (a variable, a loop, another module, a call this desktop cannot
do) is refused with an error naming it, before any action runs.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envhub_desktop.actions import (
    Button,
    Click,
    DesktopAction,
    Drag,
    KeyHold,
    Keys,
    MouseButton,
    MoveTo,
    Scroll,
    TypeText,
    Wait,
)

SPECIAL = ("WAIT", "DONE", "FAIL")
"""OSWorld's special actions: wait a moment, the task is done, the task cannot be done."""
WAIT_SECONDS = 1.0


class UnsupportedAction(ValueError):
    """The string holds something other than the supported pyautogui calls; the message names it."""


@dataclass(frozen=True)
class Parsed:
    """The actions of one string, in order, and OSWorld's DONE or FAIL if it said one."""

    actions: tuple[DesktopAction, ...]
    end: str | None = None


def _button(value: Any) -> Button:
    if value not in ("left", "middle", "right"):
        raise UnsupportedAction(f"button must be 'left', 'middle' or 'right', got {value!r}")
    return value  # type: ignore[no-any-return]


def _point(args: dict[str, Any]) -> tuple[int | None, int | None]:
    x, y = args.get("x"), args.get("y")
    if isinstance(x, tuple | list) and y is None and len(x) == 2:
        x, y = x
    if (x is None) != (y is None):
        raise UnsupportedAction("give both x and y, or neither")
    if x is None:
        return None, None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (x, y)):
        raise UnsupportedAction(f"coordinates must be numbers, got {x!r}, {y!r}")
    assert isinstance(x, int | float) and isinstance(y, int | float)
    return round(x), round(y)


def _click(args: dict[str, Any], *, button: Button = "left", count: int = 1) -> list[DesktopAction]:
    x, y = _point(args)
    clicks = args.get("clicks", count)
    if not isinstance(clicks, int) or not 1 <= clicks <= 3:
        raise UnsupportedAction(f"clicks must be 1, 2 or 3, got {clicks!r}")
    return [Click(x, y, _button(args.get("button", button)), clicks)]


def _move(args: dict[str, Any]) -> list[DesktopAction]:
    x, y = _point(args)
    if x is None or y is None:
        raise UnsupportedAction("moveTo needs x and y")
    return [MoveTo(x, y)]


def _drag(args: dict[str, Any]) -> list[DesktopAction]:
    x, y = _point(args)
    if x is None or y is None:
        raise UnsupportedAction("dragTo needs x and y")
    return [Drag(x, y, button=_button(args.get("button", "left")))]


def _mouse(down: bool) -> Callable[[dict[str, Any]], list[DesktopAction]]:
    def build(args: dict[str, Any]) -> list[DesktopAction]:
        x, y = _point(args)
        return [MouseButton(down, _button(args.get("button", "left")), x, y)]

    return build


def _scroll(horizontal: bool) -> Callable[[dict[str, Any]], list[DesktopAction]]:
    def build(args: dict[str, Any]) -> list[DesktopAction]:
        clicks = args.get("clicks")
        if not isinstance(clicks, int) or isinstance(clicks, bool) or not -100 <= clicks <= 100:
            raise UnsupportedAction(
                f"scroll takes a whole number of clicks between -100 and 100, got {clicks!r}"
            )
        x, y = _point(args)
        return [Scroll(clicks, horizontal, x, y)] if clicks else []

    return build


def _keys_of(value: Any) -> list[str]:
    keys = [value] if isinstance(value, str) else value
    if not isinstance(keys, list | tuple) or not all(isinstance(k, str) for k in keys):
        raise UnsupportedAction(f"keys must be a key name or a list of them, got {value!r}")
    return list(keys)


def _press(args: dict[str, Any]) -> list[DesktopAction]:
    presses = args.get("presses", 1)
    if not isinstance(presses, int) or not 1 <= presses <= 100:
        raise UnsupportedAction(f"presses must be between 1 and 100, got {presses!r}")
    return [Keys((key,), presses) for key in _keys_of(args.get("keys"))]


def _hotkey(args: dict[str, Any]) -> list[DesktopAction]:
    keys = args.get("*")
    if not keys:
        raise UnsupportedAction("hotkey needs at least one key")
    return [Keys(tuple(_keys_of(list(keys))))]


def _write(args: dict[str, Any]) -> list[DesktopAction]:
    message = args.get("message")
    if isinstance(message, str):
        return [TypeText(message)] if message else []
    return [Keys((key,)) for key in _keys_of(message)]  # typewrite(['a', 'enter']): key names


def _hold(down: bool) -> Callable[[dict[str, Any]], list[DesktopAction]]:
    def build(args: dict[str, Any]) -> list[DesktopAction]:
        key = args.get("key")
        if not isinstance(key, str):
            raise UnsupportedAction(f"{'keyDown' if down else 'keyUp'} needs one key name, got {key!r}")
        return [KeyHold(key, down)]

    return build


def _sleep(args: dict[str, Any]) -> list[DesktopAction]:
    seconds = args.get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        raise UnsupportedAction(f"sleep takes a number of seconds, got {seconds!r}")
    return [Wait(float(seconds))]


CALLS: dict[str, tuple[tuple[str, ...], Callable[[dict[str, Any]], list[DesktopAction]]]] = {
    # name -> (its positional parameters as pyautogui names them, the builder)
    "pyautogui.click": (("x", "y", "clicks", "interval", "button"), _click),
    "pyautogui.leftClick": (("x", "y"), _click),
    "pyautogui.rightClick": (("x", "y"), lambda a: _click(a, button="right")),
    "pyautogui.middleClick": (("x", "y"), lambda a: _click(a, button="middle")),
    "pyautogui.doubleClick": (("x", "y", "interval", "button"), lambda a: _click(a, count=2)),
    "pyautogui.tripleClick": (("x", "y", "interval", "button"), lambda a: _click(a, count=3)),
    "pyautogui.moveTo": (("x", "y", "duration"), _move),
    "pyautogui.dragTo": (("x", "y", "duration", "button"), _drag),
    "pyautogui.mouseDown": (("x", "y", "button"), _mouse(True)),
    "pyautogui.mouseUp": (("x", "y", "button"), _mouse(False)),
    "pyautogui.scroll": (("clicks", "x", "y"), _scroll(False)),
    "pyautogui.vscroll": (("clicks", "x", "y"), _scroll(False)),
    "pyautogui.hscroll": (("clicks", "x", "y"), _scroll(True)),
    "pyautogui.press": (("keys", "presses", "interval"), _press),
    "pyautogui.hotkey": (("*",), _hotkey),
    "pyautogui.typewrite": (("message", "interval"), _write),
    "pyautogui.write": (("message", "interval"), _write),
    "pyautogui.keyDown": (("key",), _hold(True)),
    "pyautogui.keyUp": (("key",), _hold(False)),
    "time.sleep": (("seconds",), _sleep),
}
IGNORED_KEYWORDS = {"interval", "duration", "tween", "logScreenshot", "_pause"}
"""Timing and logging options of pyautogui that do not change what happens on the screen."""
MODULES = {"pyautogui", "time"}


def parse(code: str) -> Parsed:
    """The actions a pyautogui string asks for, or UnsupportedAction naming what is not allowed."""
    text = code.strip()
    if text in SPECIAL:
        return Parsed((Wait(WAIT_SECONDS),) if text == "WAIT" else (), None if text == "WAIT" else text)
    try:
        tree = ast.parse(text, mode="exec")
    except SyntaxError as exc:
        raise UnsupportedAction(f"not valid Python: {exc.msg} (line {exc.lineno})") from None
    actions: list[DesktopAction] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            other = [a.name for a in node.names if a.name not in MODULES or a.asname is not None]
            if other:
                raise UnsupportedAction(
                    f"line {node.lineno}: only `import pyautogui` and `import time`, not import {other[0]}"
                )
            continue
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
            raise UnsupportedAction(
                f"line {node.lineno}: only calls such as pyautogui.click(x, y) and `import pyautogui` are "
                f"accepted, not this {type(node).__name__} statement"
            )
        actions += _call(node.value)
    return Parsed(tuple(actions))


def _call(call: ast.Call) -> list[DesktopAction]:
    name = _dotted(call.func)
    if name not in CALLS:
        supported = ", ".join(sorted(n.removeprefix("pyautogui.") for n in CALLS))
        raise UnsupportedAction(
            f"{name or ast.unparse(call.func)}() is not supported on this desktop; "
            f"the supported calls are {supported}"
        )
    params, build = CALLS[name]
    args: dict[str, Any] = {}
    values = [_literal(a, name) for a in call.args]
    if params == ("*",):
        args["*"] = [k for v in values for k in (v if isinstance(v, list | tuple) else [v])]
    else:
        if len(values) > len(params):
            raise UnsupportedAction(
                f"{name}() takes at most {len(params)} positional arguments, got {len(values)}"
            )
        args.update(zip(params, values, strict=False))
    for keyword in call.keywords:
        if keyword.arg is None:
            raise UnsupportedAction(f"{name}(): **arguments are not supported")
        if keyword.arg in IGNORED_KEYWORDS:
            continue
        if keyword.arg not in params and not (keyword.arg == "button" and "button" not in params):
            raise UnsupportedAction(f"{name}() has no argument {keyword.arg!r} here")
        args[keyword.arg] = _literal(keyword.value, name)
    return build(args)


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return ""


def _literal(node: ast.expr, name: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise UnsupportedAction(
            f"{name}(): arguments must be literal values (numbers, strings, lists), not {ast.unparse(node)!r}"
        ) from None
