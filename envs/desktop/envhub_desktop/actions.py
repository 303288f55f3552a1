"""The desktop's action vocabulary (the field's: pointer, keys, text, wait) and its xdotool command lines.

No `mousemove --sync`: Debian's xdotool (3.20160805) then waits for a motion event that never comes when
the pointer is already there, so a second click at the same point took 15 s. Without it, the motion and
the click still reach the server in order, on one connection.

One small frozen dataclass per action, so the tools, the pyautogui parser and the oracles all produce
the same values, and one place turns them into xdotool's argv (no shell: nothing the agent writes is
ever parsed by one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Button = Literal["left", "middle", "right"]
BUTTONS: dict[str, str] = {"left": "1", "middle": "2", "right": "3"}
KEYSYM = re.compile(r"^[A-Za-z0-9_]+$")
KEY_ALIASES: dict[str, str] = {
    # pyautogui's names (its KEYBOARD_KEYS) -> X keysyms; X keysym names pass through unchanged.
    "ctrl": "ctrl",
    "ctrlleft": "Control_L",
    "ctrlright": "Control_R",
    "control": "ctrl",
    "shift": "shift",
    "shiftleft": "Shift_L",
    "shiftright": "Shift_R",
    "alt": "alt",
    "altleft": "Alt_L",
    "altright": "Alt_R",
    "option": "alt",
    "win": "super",
    "winleft": "Super_L",
    "winright": "Super_R",
    "command": "super",
    "cmd": "super",
    "super": "super",
    "enter": "Return",
    "return": "Return",
    "\n": "Return",
    "tab": "Tab",
    "\t": "Tab",
    "esc": "Escape",
    "escape": "Escape",
    "backspace": "BackSpace",
    "delete": "Delete",
    "del": "Delete",
    "insert": "Insert",
    "space": "space",
    " ": "space",
    "up": "Up",
    "down": "Down",
    "left": "Left",
    "right": "Right",
    "home": "Home",
    "end": "End",
    "pageup": "Prior",
    "pgup": "Prior",
    "pagedown": "Next",
    "pgdn": "Next",
    "capslock": "Caps_Lock",
    "printscreen": "Print",
    "menu": "Menu",
    "apps": "Menu",
    **{f"f{n}": f"F{n}" for n in range(1, 25)},
    "-": "minus",
    "+": "plus",
    "=": "equal",
    ",": "comma",
    ".": "period",
    "/": "slash",
    "\\": "backslash",
    ";": "semicolon",
    "'": "apostrophe",
    "`": "grave",
    "[": "bracketleft",
    "]": "bracketright",
    "!": "exclam",
    "@": "at",
    "#": "numbersign",
    "$": "dollar",
    "%": "percent",
    "^": "asciicircum",
    "&": "ampersand",
    "*": "asterisk",
    "(": "parenleft",
    ")": "parenright",
    "_": "underscore",
    ":": "colon",
    '"': "quotedbl",
    "<": "less",
    ">": "greater",
    "?": "question",
    "~": "asciitilde",
    "|": "bar",
    "{": "braceleft",
    "}": "braceright",
}


def keysym(key: str) -> str:
    """An X keysym for a key name (pyautogui's, the DOM's common ones, or X's own); ValueError if none."""
    name = KEY_ALIASES.get(key, KEY_ALIASES.get(key.lower(), key))
    if not KEYSYM.match(name):
        raise ValueError(
            f"unknown key {key!r}: use a key name such as enter, tab, ctrl, a, F5 or an X keysym"
        )
    return name


@dataclass(frozen=True)
class MoveTo:
    x: int
    y: int

    def xdotool(self) -> list[str]:
        return ["xdotool", "mousemove", str(self.x), str(self.y)]

    def describe(self) -> str:
        return f"move to ({self.x}, {self.y})"


@dataclass(frozen=True)
class Click:
    """A click (count 2: a double click) where the pointer is, or at (x, y) when given."""

    x: int | None = None
    y: int | None = None
    button: Button = "left"
    count: int = 1

    def xdotool(self) -> list[str]:
        move = [] if self.x is None or self.y is None else ["mousemove", str(self.x), str(self.y)]
        # xdotool sleeps `--delay` (100 ms unless given) after every click, the last one too.
        repeat = ["--repeat", str(self.count), "--delay", "80"] if self.count > 1 else ["--delay", "0"]
        return ["xdotool", *move, "click", *repeat, BUTTONS[self.button]]

    def describe(self) -> str:
        where = "" if self.x is None else f" at ({self.x}, {self.y})"
        return f"{self.button} click x{self.count}{where}"


@dataclass(frozen=True)
class MouseButton:
    """Press (`down`) or release a button, where the pointer is or at (x, y)."""

    down: bool
    button: Button = "left"
    x: int | None = None
    y: int | None = None

    def xdotool(self) -> list[str]:
        move = [] if self.x is None or self.y is None else ["mousemove", str(self.x), str(self.y)]
        return ["xdotool", *move, "mousedown" if self.down else "mouseup", BUTTONS[self.button]]

    def describe(self) -> str:
        return f"{self.button} button {'down' if self.down else 'up'}"


@dataclass(frozen=True)
class Drag:
    """Press at the start (the pointer's place when from_x is None), move in steps, release at the end:
    toolkits see a real drag only when the pointer moves while the button is down."""

    to_x: int
    to_y: int
    from_x: int | None = None
    from_y: int | None = None
    button: Button = "left"

    def xdotool(self) -> list[str]:
        start = (
            []
            if self.from_x is None or self.from_y is None
            else ["mousemove", str(self.from_x), str(self.from_y)]
        )
        b = BUTTONS[self.button]
        return [
            "xdotool", *start, "mousedown", b, "sleep", "0.05",
            "mousemove_relative", "--", "1", "1", "sleep", "0.05",
            "mousemove", str(self.to_x), str(self.to_y), "sleep", "0.05", "mouseup", b,
        ]  # fmt: skip

    def describe(self) -> str:
        return f"drag to ({self.to_x}, {self.to_y})"


@dataclass(frozen=True)
class Scroll:
    """Wheel clicks: positive `clicks` scroll up (or right when `horizontal`), as in pyautogui."""

    clicks: int
    horizontal: bool = False
    x: int | None = None
    y: int | None = None

    def xdotool(self) -> list[str]:
        up, down = ("7", "6") if self.horizontal else ("4", "5")
        button = up if self.clicks > 0 else down
        move = [] if self.x is None or self.y is None else ["mousemove", str(self.x), str(self.y)]
        return ["xdotool", *move, "click", "--repeat", str(abs(self.clicks)), "--delay", "30", button]

    def describe(self) -> str:
        return f"scroll {self.clicks} {'right' if self.horizontal else 'up'}"


@dataclass(frozen=True)
class Keys:
    """Keys pressed together (a combination such as ctrl+s), `presses` times."""

    keys: tuple[str, ...]
    presses: int = 1

    def __post_init__(self) -> None:
        if not self.keys:
            raise ValueError("name at least one key")
        for key in self.keys:
            keysym(key)  # refuse an unknown name now, not in xdotool

    def xdotool(self) -> list[str]:
        combo = "+".join(keysym(k) for k in self.keys)
        delay = ["--delay", "40"] if self.presses > 1 else []  # the delay follows every press, the last too
        return ["xdotool", "key", *delay, *([combo] * self.presses)]

    def describe(self) -> str:
        return "+".join(self.keys) + (f" x{self.presses}" if self.presses > 1 else "")


@dataclass(frozen=True)
class KeyHold:
    """Hold a key down (`down`) or let it go: pyautogui's keyDown/keyUp."""

    key: str
    down: bool

    def __post_init__(self) -> None:
        keysym(self.key)

    def xdotool(self) -> list[str]:
        return ["xdotool", "keydown" if self.down else "keyup", keysym(self.key)]

    def describe(self) -> str:
        return f"{self.key} {'down' if self.down else 'up'}"


@dataclass(frozen=True)
class TypeText:
    text: str

    def xdotool(self) -> list[str]:
        """One line's xdotool run (`lines` splits the text; `commands` joins them with Return)."""
        return ["xdotool", "type", "--delay", "12", "--", self.text]

    def describe(self) -> str:
        return f"type {self.text!r}"


@dataclass(frozen=True)
class Wait:
    seconds: float

    def __post_init__(self) -> None:
        if not 0 <= self.seconds <= 30:
            raise ValueError(f"wait between 0 and 30 seconds, got {self.seconds}")

    def xdotool(self) -> list[str]:
        return ["xdotool", "sleep", str(self.seconds)]

    def describe(self) -> str:
        return f"wait {self.seconds:g} s"


DesktopAction = MoveTo | Click | MouseButton | Drag | Scroll | Keys | KeyHold | TypeText | Wait


def points(action: DesktopAction) -> list[tuple[int, int]]:
    """The screen points an action names, for a bounds check against the screen size."""
    if isinstance(action, MoveTo):
        return [(action.x, action.y)]
    if isinstance(action, Click | MouseButton | Scroll) and action.x is not None and action.y is not None:
        return [(action.x, action.y)]
    if isinstance(action, Drag):
        start = [] if action.from_x is None or action.from_y is None else [(action.from_x, action.from_y)]
        return [*start, (action.to_x, action.to_y)]
    return []


def commands(action: DesktopAction) -> list[list[str]]:
    """The xdotool runs an action takes: one, except for text with newlines, typed line by line with a
    Return key between (xdotool's `type` sends a newline as Linefeed, which GTK and LibreOffice ignore,
    and it takes every argument after it as text, so it cannot be chained)."""
    if not isinstance(action, TypeText) or "\n" not in action.text:
        return [action.xdotool()]
    runs: list[list[str]] = []
    lines = action.text.split("\n")
    for i, line in enumerate(lines):
        if line:
            runs.append(TypeText(line).xdotool())
        if i < len(lines) - 1:
            runs.append(Keys(("Return",)).xdotool())
    return runs
