"""Spreadsheet tasks in LibreOffice Calc: edit a seeded flat-ODS sheet and save it (in its own format,
or as CSV through Save As); the checker reads the saved cells, sheet names and cell styles, and, since
each task says to use Calc, requires LibreOffice's own save metadata on an ODS save
(`envhub_desktop.provenance`).

Oracles are keyboard first, as a person fluent in Calc works: Tab and Enter move between cells, ctrl+b
bolds, alt+d opens the Data menu (its second entry is Sort Ascending, which sorts the block around the
cursor by the cursor's column and keeps a header row), alt+s the Sheet menu (walked with Down: its 10th
entry is Insert Sheet at End, its 19th Rename Sheet when the workbook has two sheets, so that Delete and
Hide Sheet are enabled), ctrl+shift+s Save As (Tab to its file type list, whose entries are picked by
typing their names; Calc then asks to keep the format and for the CSV options: Enter takes the defaults).
"""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Callable, Sequence

from envhub_desktop.actions import DesktopAction, Keys, TypeText, Wait
from envhub_desktop.odf import Cell, cell_index, fods, fods_book, read_bold, read_cells, sheet_names
from envhub_desktop.office import OFFICE_OPTIONS
from envhub_desktop.provenance import saved_by_office
from envhub_desktop.tasks.base import WORDS, Check, Episode, Saved, Task

SAVE: list[DesktopAction] = [Keys(("ctrl", "s")), Wait(1.5)]
Rows = list[list[Cell]]
ITEMS = ("rent", "food", "travel", "books", "power", "water", "phone", "gym", "tea", "bike", "gift", "desk")


def calc(path: str) -> list[str]:
    return ["soffice", "--calc", *OFFICE_OPTIONS, path]


def _grid_is(data: bytes, rows: Sequence[Sequence[Cell]], sheet: int = 0) -> bool:
    """The sheet holds exactly `rows`, with an empty column right of them and two empty rows below."""
    width = max((len(row) for row in rows), default=0) + 1
    grid = read_cells(data, rows=len(rows) + 2, columns=width, sheet=sheet)
    want = [[*row, *([None] * (width - len(row)))] for row in rows]
    return grid == [*want, [None] * width, [None] * width]


def _book_is(
    path: str, seed: str, sheets: Sequence[tuple[str, Rows]], header_bold: int | None = None
) -> Check:
    """The saved workbook, saved by LibreOffice after the seed, has exactly these sheets and cells; with
    `header_bold`, the first row's first `header_bold` cells are bold and no other cell of the table is."""

    def check(saved: Saved) -> bool:
        data = saved.files.get(path)
        if data is None or not saved_by_office(data, seeded=seed.encode()):
            return False
        try:
            if sheet_names(data) != [name for name, _ in sheets]:
                return False
            if not all(_grid_is(data, rows, i) for i, (_, rows) in enumerate(sheets)):
                return False
            if header_bold is None:
                return True
            rows = sheets[0][1]
            bold = read_bold(data, rows=len(rows), columns=header_bold)
            return bold == [[True] * header_bold] + [[False] * header_bold for _ in rows[1:]]
        except Exception:  # not a spreadsheet any more: the task failed
            return False

    return check


def _budget(rng: random.Random, low: int = 2, high: int = 5) -> Rows:
    """A header and rows of distinct items with distinct costs."""
    items = rng.sample(ITEMS, rng.randint(low, high))
    costs = rng.sample(range(5, 1000), len(items))
    rows: Rows = [["item", "cost"]]
    return rows + [[item, cost] for item, cost in zip(items, costs, strict=True)]


def _sheet_name(rng: random.Random, *avoid: str) -> str:
    return rng.choice([w for w in WORDS if w not in avoid])


def calc_add_row(rng: random.Random) -> Episode:
    rows = _budget(rng)
    item = rng.choice([i for i in ITEMS if i not in {r[0] for r in rows}])
    cost = rng.randint(1, 500)
    path, seed = "/work/budget.fods", fods(rows)
    return Episode(
        goal=f"In the open spreadsheet budget.fods, add a row below the last one with item `{item}` and cost "
        f"{cost} (item in column A, cost in column B), then save the file in its own format with Calc.",
        files={path: seed},
        app=calc(path),
        window="budget",
        reads=(path,),
        check=_book_is(path, seed, [("Sheet1", [*rows, [item, cost]])]),
        oracle=[
            Keys(("ctrl", "Home")),
            Keys(("Down",), len(rows)),
            TypeText(item),
            Keys(("Tab",)),
            TypeText(f"{cost}\n"),
            *SAVE,
        ],
    )


def calc_total(rng: random.Random) -> Episode:
    rows = _budget(rng)
    total: Cell = sum(int(r[1]) for r in rows[1:] if isinstance(r[1], int))
    path, seed = "/work/costs.fods", fods(rows)
    last = len(rows)
    target = f"B{last + 1}"
    row, _ = cell_index(target)
    return Episode(
        goal=f"In the open spreadsheet costs.fods, put the total of the costs (B2:B{last}) in cell {target}, "
        f"with `total` in A{last + 1}, then save the file in its own format with Calc.",
        files={path: seed},
        app=calc(path),
        window="costs",
        reads=(path,),
        check=_book_is(path, seed, [("Sheet1", [*rows, ["total", total]])]),
        oracle=[
            Keys(("ctrl", "Home")),
            Keys(("Down",), row),
            TypeText("total"),
            Keys(("Tab",)),
            TypeText(f"=SUM(B2:B{last})\n"),
            *SAVE,
        ],
    )


def calc_formula_column(rng: random.Random) -> Episode:
    items = rng.sample(ITEMS, rng.randint(2, 5))
    lines = [(item, rng.randint(2, 99), rng.randint(1, 20)) for item in items]
    rows: Rows = [["item", "price", "qty"]]
    rows += [[item, price, qty] for item, price, qty in lines]
    path, seed = "/work/orders.fods", fods(rows)
    last = len(rows)
    want: Rows = [["item", "price", "qty", "amount"]]
    want += [[item, price, qty, price * qty] for item, price, qty in lines]
    return Episode(
        goal=f"In the open spreadsheet orders.fods, fill column D: `amount` in D1 and, in D2:D{last}, each "
        "row's price times its qty (a formula such as =B2*C2 or the number itself), then save the file in "
        "its own format with Calc.",
        files={path: seed},
        app=calc(path),
        window="orders",
        reads=(path,),
        check=_book_is(path, seed, [("Sheet1", want)]),
        oracle=[
            Keys(("ctrl", "Home")),
            Keys(("Right",), 3),
            TypeText("amount\n" + "".join(f"=B{r}*C{r}\n" for r in range(2, last + 1))),
            *SAVE,
        ],
    )


def calc_sort_rows(rng: random.Random) -> Episode:
    header, *body = _budget(rng, 3, 6)
    ordered = sorted(body, key=lambda row: float(row[1] or 0))
    while body == ordered:
        body = rng.sample(body, len(body))
    rows = [header, *body]
    path, seed = "/work/spend.fods", fods(rows)
    return Episode(
        goal="In the open spreadsheet spend.fods, sort the rows below the header by cost (column B), "
        "smallest first, keeping each item with its cost and the header in row 1 (Data > Sort Ascending "
        "or Data > Sort), then save the file in its own format with Calc.",
        files={path: seed},
        app=calc(path),
        window="spend",
        reads=(path,),
        check=_book_is(path, seed, [("Sheet1", [header, *ordered])]),
        oracle=[
            Keys(("ctrl", "Home")),
            Keys(("Down",)),
            Keys(("Right",)),
            Keys(("alt", "d")),
            Keys(("Down",)),
            Keys(("Return",)),
            Wait(0.5),
            *SAVE,
        ],
    )


def calc_rename_sheet(rng: random.Random) -> Episode:
    first, second = rng.sample(WORDS, 2)
    new = _sheet_name(rng, first, second)
    sheets: list[tuple[str, Rows]] = [(first, _budget(rng)), (second, [["note"], [rng.choice(WORDS)]])]
    path, seed = "/work/book.fods", fods_book(sheets)
    return Episode(
        goal=f"In the open spreadsheet book.fods, rename the sheet `{first}` to `{new}` (Sheet > Rename "
        f"Sheet, or the sheet tab's menu); leave the sheet `{second}` and every cell as they are, then save "
        "the file in its own format with Calc.",
        files={path: seed},
        app=calc(path),
        window="book",
        reads=(path,),
        check=_book_is(path, seed, [(new, sheets[0][1]), sheets[1]]),
        oracle=[
            Keys(("alt", "s")),
            Keys(("Down",), 18),
            Keys(("Return",)),
            Wait(1.0),
            TypeText(f"{new}\n"),
            Wait(0.5),
            *SAVE,
        ],
    )


def calc_append_sheet(rng: random.Random) -> Episode:
    first = _sheet_name(rng)
    new = _sheet_name(rng, first)
    rows = _budget(rng)
    path, seed = "/work/ledger.fods", fods(rows, sheet=first)
    return Episode(
        goal=f"In the open spreadsheet ledger.fods, add a new empty sheet named `{new}` after the sheet "
        f"`{first}` (Sheet > Insert Sheet at End, or Insert Sheet); leave `{first}` as it is, then save the "
        "file in its own format with Calc.",
        files={path: seed},
        app=calc(path),
        window="ledger",
        reads=(path,),
        check=_book_is(path, seed, [(first, rows), (new, [])]),
        oracle=[
            Keys(("alt", "s")),
            Keys(("Down",), 9),
            Keys(("Return",)),
            Wait(1.0),
            TypeText(f"{new}\n"),
            Wait(0.5),
            *SAVE,
        ],
    )


def calc_bold_header(rng: random.Random) -> Episode:
    columns = rng.randint(2, 4)
    names = rng.sample(["item", "cost", "owner", "month", "place", "kind"], columns)
    rows: Rows = [list(names)]
    for item in rng.sample(ITEMS, 3):
        rows.append([item, *rng.sample(range(1, 500), columns - 1)])
    path, seed = "/work/report.fods", fods(rows)
    end = chr(ord("A") + columns - 1)
    return Episode(
        goal=f"In the open spreadsheet report.fods, make the header cells A1:{end}1 bold and leave every "
        "other cell as it is (not bold), then save the file in its own format with Calc.",
        files={path: seed},
        app=calc(path),
        window="report",
        reads=(path,),
        check=_book_is(path, seed, [("Sheet1", rows)], header_bold=columns),
        oracle=[Keys(("ctrl", "Home")), Keys(("shift", "Right"), columns - 1), Keys(("ctrl", "b")), *SAVE],
    )


def csv_is(rows: Sequence[Sequence[Cell]], path: str) -> Check:
    """The file is comma-separated text of exactly these rows (numbers as Calc writes whole numbers)."""

    def check(saved: Saved) -> bool:
        text = saved.text(path)
        if text is None or len(text) > 1_000_000:
            return False
        try:
            got = list(csv.reader(io.StringIO(text, newline="")))
        except csv.Error:
            return False
        return got == [["" if v is None else str(v) for v in row] for row in rows]

    return check


def calc_export_csv(rng: random.Random) -> Episode:
    rows = _budget(rng)
    name = rng.choice(["prices", "export", "table", "sheet"])
    path, out = "/work/data.fods", f"/work/{name}.csv"
    return Episode(
        goal=f"Export the sheet of the open spreadsheet data.fods as comma-separated text to {out} with "
        "Calc's File > Save As (file type Text CSV; keep the CSV format and its default options).",
        files={path: fods(rows)},
        app=calc(path),
        window="data",
        reads=(out,),
        check=csv_is(rows, out),
        oracle=[
            Keys(("ctrl", "shift", "s")),
            Wait(1.5),
            Keys(("ctrl", "a")),
            TypeText(name),
            Keys(("Tab",)),
            TypeText("Text CSV"),
            Keys(("Return",)),
            Wait(1.5),
            Keys(("Return",)),  # Confirm File Format: use Text CSV
            Wait(1.5),
            Keys(("Return",)),  # Export Text File: the default options
            Wait(1.5),
        ],
    )


def _task(name: str, summary: str, build: Callable[[random.Random], Episode]) -> Task:
    return Task(name, "libreoffice-calc", summary, build)


TASKS = (
    _task("calc-add-row", "add a row to a spreadsheet and save it", calc_add_row),
    _task("calc-total", "write a total row of a column and save", calc_total),
    _task("calc-formula-column", "fill a column with price times quantity and save", calc_formula_column),
    _task("calc-sort-rows", "sort a sheet's rows by a column and save", calc_sort_rows),
    _task("calc-rename-sheet", "rename a sheet and save", calc_rename_sheet),
    _task("calc-append-sheet", "add a named sheet at the end and save", calc_append_sheet),
    _task("calc-bold-header", "make a header row bold and save", calc_bold_header),
    _task("calc-export-csv", "export a sheet to CSV through Save As", calc_export_csv),
)
