"""Spreadsheet tasks in LibreOffice Calc: edit a seeded flat-ODS sheet and save it in its own format;
the checker reads the saved cells."""

from __future__ import annotations

import random

from envhub_desktop.actions import Keys, TypeText, Wait
from envhub_desktop.odf import Cell, cell_index, fods, read_cells
from envhub_desktop.office import OFFICE_OPTIONS
from envhub_desktop.tasks.base import Check, Episode, Saved, Task

CALC_RESIDENT = ("soffice", "--nodefault", *OFFICE_OPTIONS)
"""LibreOffice started with no document, on a spare desktop: a later `soffice file` hands the file to it
over its pipe. No task uses it now: with the prepared profile (`envhub_desktop.office`) it saves only
~0.3 s, and a spare taken while it still initialises (back-to-back resets) shows the document's window
unpainted for over half a second, so two resets of one seed could observe different first screens."""


def calc(path: str) -> list[str]:
    return ["soffice", "--calc", *OFFICE_OPTIONS, path]


def _sheet_is(expected: list[list[Cell]], path: str) -> Check:
    def check(saved: Saved) -> bool:
        data = saved.files.get(path)
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


TASKS = (
    Task(
        "calc-add-row",
        "libreoffice-calc",
        "add a row to a spreadsheet and save it",
        calc_add_row,
        CALC_RESIDENT,
    ),
    Task(
        "calc-total", "libreoffice-calc", "write a total row of a column and save", calc_total, CALC_RESIDENT
    ),
)
