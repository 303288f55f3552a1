"""The desktop tasks: a seeded starting state, the app to open, a checker of the saved file, an oracle.

Each task's `build(rng)` draws one episode. The checker reads only files the app leaves in the sandbox
(never pixels); the oracle is the list of GUI actions (keyboard first) that a person would take, played
by the env through the same xdotool path as the agent's own actions.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from envhub_desktop.actions import DesktopAction, Keys, TypeText, Wait
from envhub_desktop.odf import Cell, cell_index, fods, read_cells
from envhub_desktop.office import OFFICE_OPTIONS

WORDS = [
    *("apple", "river", "stone", "cloud", "maple", "copper", "lantern", "meadow", "harbor", "violet"),
    *("falcon", "summit", "ember", "willow", "canyon", "orbit", "pepper", "quartz", "saddle", "timber"),
]
CALC_RESIDENT = ("soffice", "--nodefault", *OFFICE_OPTIONS)
"""LibreOffice started with no document, on a spare desktop: a later `soffice file` hands the file to it
over its pipe. No task uses it now: with the prepared profile (`envhub_desktop.office`) it saves only
~0.3 s, and a spare taken while it still initialises (back-to-back resets) shows the document's window
unpainted for over half a second, so two resets of one seed could observe different first screens."""


def calc(path: str) -> list[str]:
    return ["soffice", "--calc", *OFFICE_OPTIONS, path]


@dataclass(frozen=True)
class Episode:
    """One drawn task: what the agent is told, the files it starts with, and how it is judged."""

    goal: str
    files: Mapping[str, str | bytes]
    """Sandbox path -> content, written before the app starts."""
    app: list[str]
    """The app's command line, started on the desktop."""
    window: str
    """A regex of the app's window title: the episode starts once it shows."""
    reads: tuple[str, ...]
    """The files the checker reads after the episode (missing ones are passed as None)."""
    check: Callable[[Mapping[str, bytes | None]], bool]
    oracle: list[DesktopAction] = field(default_factory=list)


@dataclass(frozen=True)
class Task:
    name: str
    app: str
    summary: str
    build: Callable[[random.Random], Episode]
    resident: tuple[str, ...] = ()
    """A program a spare desktop starts ahead of the episode so the app opens fast (none: nothing)."""

    @property
    def office(self) -> bool:
        """Whether the app is LibreOffice, which wants the prepared profile (`envhub_desktop.office`)."""
        return self.app.startswith("libreoffice")


def _lines(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.sample(WORDS, 3)) for _ in range(n)]


def _text_is(expected: list[str], path: str) -> Callable[[Mapping[str, bytes | None]], bool]:
    """The file holds exactly these lines (one trailing newline or none: editors differ)."""

    def check(files: Mapping[str, bytes | None]) -> bool:
        data = files.get(path)
        if data is None:
            return False
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return False
        return text.removesuffix("\n").split("\n") == expected

    return check


def append_line(rng: random.Random) -> Episode:
    lines = _lines(rng, rng.randint(2, 5))
    new = " ".join(rng.sample(WORDS, 4))
    path = "/work/notes.txt"
    return Episode(
        goal=f"In the open text editor, add a new last line reading exactly `{new}` to notes.txt and save "
        "it.",
        files={path: "\n".join(lines) + "\n"},
        app=["mousepad", path],
        window="notes.txt",
        reads=(path,),
        check=_text_is([*lines, new], path),
        oracle=[Keys(("ctrl", "End")), TypeText(new + "\n"), Keys(("ctrl", "s")), Wait(0.5)],
    )


def delete_line(rng: random.Random) -> Episode:
    lines = _lines(rng, rng.randint(3, 6))
    k = rng.randrange(len(lines))
    path = "/work/todo.txt"
    return Episode(
        goal=f"In the open text editor, delete the line `{lines[k]}` from todo.txt (the whole line, nothing "
        "else) and save the file.",
        files={path: "\n".join(lines) + "\n"},
        app=["mousepad", path],
        window="todo.txt",
        reads=(path,),
        check=_text_is(lines[:k] + lines[k + 1 :], path),
        oracle=[
            Keys(("ctrl", "Home")),
            *([Keys(("Down",), k)] if k else []),
            Keys(("Home",)),
            Keys(("shift", "Down")),
            Keys(("Delete",)),
            Keys(("ctrl", "s")),
            Wait(0.5),
        ],
    )


def replace_word(rng: random.Random) -> Episode:
    lines = _lines(rng, rng.randint(2, 4))
    old = lines[rng.randrange(len(lines))].split()[rng.randrange(3)]
    new = rng.choice([w for w in WORDS if w not in " ".join(lines).split()]).upper()
    path = "/work/draft.txt"
    expected = [" ".join(new if w == old else w for w in line.split()) for line in lines]
    return Episode(
        goal=f"In the open text editor, replace every `{old}` in draft.txt with `{new}` and save the file.",
        files={path: "\n".join(lines) + "\n"},
        app=["mousepad", path],
        window="draft.txt",
        reads=(path,),
        check=_text_is(expected, path),
        # Retyping the document is the keyboard-only route that needs no dialog's layout.
        oracle=[Keys(("ctrl", "a")), TypeText("\n".join(expected) + "\n"), Keys(("ctrl", "s")), Wait(0.5)],
    )


def _sheet_is(expected: list[list[Cell]], path: str) -> Callable[[Mapping[str, bytes | None]], bool]:
    def check(files: Mapping[str, bytes | None]) -> bool:
        data = files.get(path)
        if data is None:
            return False
        try:
            grid = read_cells(data, rows=len(expected) + 2, columns=3)
        except Exception:  # not a spreadsheet any more: the task failed
            return False
        want = [[*row, *([None] * (3 - len(row)))] for row in expected]
        return grid == [*want, [None] * 3, [None] * 3]

    return check


def _budget(rng: random.Random) -> list[list[Cell]]:
    items = rng.sample(
        ["rent", "food", "travel", "books", "power", "water", "phone", "gym"], rng.randint(2, 5)
    )
    rows: list[list[Cell]] = [["item", "cost"]]
    return rows + [[item, rng.randint(5, 999)] for item in items]


def calc_add_row(rng: random.Random) -> Episode:
    rows = _budget(rng)
    item = rng.choice(["tea", "bike", "gift", "desk"])
    cost = rng.randint(1, 500)
    path = "/work/budget.fods"
    return Episode(
        goal=f"In the open spreadsheet budget.fods, add a row below the last one with item `{item}` and cost "
        f"{cost} (item in column A, cost in column B), then save the file in its own format.",
        files={path: fods(rows)},
        app=calc(path),
        window="budget",
        reads=(path,),
        check=_sheet_is([*rows, [item, cost]], path),
        oracle=[
            Keys(("ctrl", "Home")),
            Keys(("Down",), len(rows)),
            TypeText(item),
            Keys(("Tab",)),
            TypeText(f"{cost}\n"),
            Keys(("ctrl", "s")),
            Wait(1.5),
        ],
    )


def calc_total(rng: random.Random) -> Episode:
    rows = _budget(rng)
    total: Cell = sum(int(r[1]) for r in rows[1:] if isinstance(r[1], int))
    path = "/work/costs.fods"
    last = len(rows)
    target = f"B{last + 1}"
    row, _ = cell_index(target)
    return Episode(
        goal=f"In the open spreadsheet costs.fods, put the total of the costs (B2:B{last}) in cell {target}, "
        f"with `total` in A{last + 1}, then save the file in its own format.",
        files={path: fods(rows)},
        app=calc(path),
        window="costs",
        reads=(path,),
        check=_sheet_is([*rows, ["total", total]], path),
        oracle=[
            Keys(("ctrl", "Home")),
            Keys(("Down",), row),
            TypeText("total"),
            Keys(("Tab",)),
            TypeText(f"=SUM(B2:B{last})\n"),
            Keys(("ctrl", "s")),
            Wait(1.5),
        ],
    )


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task("editor-append-line", "mousepad", "append a given line to a text file and save", append_line),
        Task("editor-delete-line", "mousepad", "delete a named line of a text file and save", delete_line),
        Task(
            "editor-replace-word", "mousepad", "replace a word throughout a text file and save", replace_word
        ),
        Task(
            "calc-add-row",
            "libreoffice-calc",
            "add a row to a spreadsheet and save it",
            calc_add_row,
            CALC_RESIDENT,
        ),
        Task(
            "calc-total",
            "libreoffice-calc",
            "write a total row of a column and save",
            calc_total,
            CALC_RESIDENT,
        ),
    )
}
