"""Spreadsheets in OpenDocument form: write a task's seeded sheet, read back what Calc saved.

Seeds are flat ODS (`.fods`: one XML file, which LibreOffice opens and saves as is), so no office
library is needed to make them; saved `.ods` files are a zip holding the same `content.xml`. The
checker reads cell values the way the file stores them (office:value for numbers, the paragraphs'
text otherwise), repeated rows and columns expanded up to the bounds asked for.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape, quoteattr

OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
MAX_STYLE_DEPTH = 16
"""How many parent styles a cell's boldness is followed through (a cycle of parents stops there)."""
Cell = str | int | float | None
MAX_CONTENT_BYTES = 32 * 1024 * 1024
"""The most XML the checker parses: a saved sheet of a task is kilobytes; a bigger one fails the check."""


def fods(rows: Sequence[Sequence[Cell]], *, sheet: str = "Sheet1") -> str:
    """A flat ODS document of one sheet holding `rows` (numbers as numbers, None as an empty cell)."""
    return fods_book([(sheet, rows)])


def fods_book(sheets: Sequence[tuple[str, Sequence[Sequence[Cell]]]]) -> str:
    """A flat ODS document of these (name, rows) sheets, in order."""
    tables = "".join(
        f"<table:table table:name={quoteattr(name)}>{_rows_xml(rows)}</table:table>" for name, rows in sheets
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<office:document xmlns:office="{OFFICE}" xmlns:table="{TABLE}" xmlns:text="{TEXT}" '
        'office:version="1.3" office:mimetype="application/vnd.oasis.opendocument.spreadsheet">'
        f"<office:body><office:spreadsheet>{tables}</office:spreadsheet></office:body></office:document>\n"
    )


def _rows_xml(rows: Sequence[Sequence[Cell]]) -> str:
    body = []
    for row in rows:
        cells = []
        for value in row:
            if value is None:
                cells.append("<table:table-cell/>")
            elif isinstance(value, int | float):
                cells.append(
                    f'<table:table-cell office:value-type="float" office:value="{value}">'
                    f"<text:p>{value}</text:p></table:table-cell>"
                )
            else:
                text = f"<text:p>{escape(value)}</text:p>"
                cells.append(f'<table:table-cell office:value-type="string">{text}</table:table-cell>')
        body.append(f"<table:table-row>{''.join(cells)}</table:table-row>")
    return "".join(body)


def content_xml(data: bytes) -> bytes:
    """The XML holding the sheets: the file itself (flat ODS) or content.xml of a zipped .ods."""
    if data.startswith(b"PK"):
        return _part(data, "content.xml")
    if len(data) > MAX_CONTENT_BYTES:
        raise ValueError(f"the document is {len(data)} bytes, more than a task's sheet holds")
    return data


def _part(data: bytes, name: str) -> bytes:
    """One member of a zipped document, refused when bigger than a task's document could be."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        info = archive.getinfo(name)
        if info.file_size > MAX_CONTENT_BYTES:
            raise ValueError(f"{name} is {info.file_size} bytes, more than a task's sheet holds")
        return archive.read(info)


def read_cells(data: bytes, *, rows: int = 64, columns: int = 26, sheet: int = 0) -> list[list[Cell]]:
    """A sheet's values (the first unless `sheet` says) in a `rows` x `columns` grid (None where empty,
    and for a sheet that is not there); a float that is a whole number comes back as int. Python's
    expat refuses entity-expansion bombs (billion laughs)."""
    root = ET.fromstring(content_xml(data))
    return [
        [_value(c) if c is not None else None for c, _ in row] for row in _grid(root, sheet, rows, columns)
    ]


def read_bold(data: bytes, *, rows: int = 64, columns: int = 26, sheet: int = 0) -> list[list[bool]]:
    """Whether each cell of the grid is bold: its own style, else its row's or column's default cell
    style, followed through parent styles (automatic ones in content.xml, named ones in styles.xml)."""
    root = ET.fromstring(content_xml(data))
    styles = _cell_styles(
        [root, *([ET.fromstring(_part(data, "styles.xml"))] if data.startswith(b"PK") else [])]
    )
    return [[_bold(style, styles) for _, style in row] for row in _grid(root, sheet, rows, columns)]


def sheet_names(data: bytes) -> list[str]:
    """The sheets' names, in order."""
    root = ET.fromstring(content_xml(data))
    return [t.get(f"{{{TABLE}}}name", "") for t in root.iter(f"{{{TABLE}}}table")]


Slot = tuple[ET.Element | None, str | None]
"""A grid cell: its element (None past the sheet's end) and the cell style that applies to it."""


def _grid(root: ET.Element, sheet: int, rows: int, columns: int) -> list[list[Slot]]:
    """The sheet's cells, repeated rows and columns expanded up to the bounds."""
    tables = list(root.iter(f"{{{TABLE}}}table"))
    empty: list[Slot] = [(None, None)] * columns
    if not 0 <= sheet < len(tables):
        return [list(empty) for _ in range(rows)]
    table = tables[sheet]
    defaults: list[str | None] = []
    for column in table.iter(f"{{{TABLE}}}table-column"):
        repeat = min(int(column.get(f"{{{TABLE}}}number-columns-repeated", "1")), columns)
        defaults += [column.get(f"{{{TABLE}}}default-cell-style-name")] * repeat
        if len(defaults) >= columns:
            break
    defaults = (defaults + [None] * columns)[:columns]
    grid: list[list[Slot]] = []
    for row in table.iter(f"{{{TABLE}}}table-row"):
        row_style = row.get(f"{{{TABLE}}}default-cell-style-name")
        slots: list[Slot] = []
        for cell in row:
            if cell.tag not in (f"{{{TABLE}}}table-cell", f"{{{TABLE}}}covered-table-cell"):
                continue
            repeat = min(int(cell.get(f"{{{TABLE}}}number-columns-repeated", "1")), columns)
            for _ in range(repeat):
                style = (
                    cell.get(f"{{{TABLE}}}style-name") or row_style or defaults[min(len(slots), columns - 1)]
                )
                slots.append((cell, style))
            if len(slots) >= columns:
                break
        slots = (slots + [(None, row_style or defaults[i]) for i in range(len(slots), columns)])[:columns]
        for _ in range(min(int(row.get(f"{{{TABLE}}}number-rows-repeated", "1")), rows)):
            grid.append(list(slots))
        if len(grid) >= rows:
            break
    return (grid + [list(empty) for _ in range(rows)])[:rows]


def _cell_styles(roots: list[ET.Element]) -> dict[str, tuple[str | None, str | None]]:
    """Cell style name -> (parent style name, fo:font-weight it sets or None)."""
    found: dict[str, tuple[str | None, str | None]] = {}
    for root in roots:
        for style in root.iter(f"{{{STYLE}}}style"):
            if style.get(f"{{{STYLE}}}family") != "table-cell":
                continue
            props = style.find(f"{{{STYLE}}}text-properties")
            weight = props.get(f"{{{FO}}}font-weight") if props is not None else None
            found[style.get(f"{{{STYLE}}}name", "")] = (style.get(f"{{{STYLE}}}parent-style-name"), weight)
    return found


def _bold(name: str | None, styles: dict[str, tuple[str | None, str | None]]) -> bool:
    for _ in range(MAX_STYLE_DEPTH):  # a parent cycle ends here
        if name is None or name not in styles:
            return False
        parent, weight = styles[name]
        if weight is not None:
            return weight == "bold" or (weight.isdigit() and int(weight) >= 600)
        name = parent
    return False


def _value(cell: ET.Element) -> Cell:
    kind = cell.get(f"{{{OFFICE}}}value-type")
    if kind in ("float", "percentage", "currency"):
        number = float(cell.get(f"{{{OFFICE}}}value", "nan"))
        return int(number) if number.is_integer() else number
    paragraphs = ["".join(p.itertext()) for p in cell.iter(f"{{{TEXT}}}p")]
    return "\n".join(paragraphs) if paragraphs else None


def cell_index(ref: str) -> tuple[int, int]:
    """(row, column) from 0 of an A1-style reference such as "B3"."""
    letters = "".join(c for c in ref if c.isalpha()).upper()
    digits = ref[len(letters) :]
    if not letters or not digits.isdigit():
        raise ValueError(f"{ref!r} is not a cell reference like B3")
    column = 0
    for c in letters:
        column = column * 26 + ord(c) - ord("A") + 1
    return int(digits) - 1, column - 1
