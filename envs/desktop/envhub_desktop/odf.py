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
Cell = str | int | float | None
MAX_CONTENT_BYTES = 32 * 1024 * 1024
"""The most XML the checker parses: a saved sheet of a task is kilobytes; a bigger one fails the check."""


def fods(rows: Sequence[Sequence[Cell]], *, sheet: str = "Sheet1") -> str:
    """A flat ODS document of one sheet holding `rows` (numbers as numbers, None as an empty cell)."""
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
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<office:document xmlns:office="{OFFICE}" xmlns:table="{TABLE}" xmlns:text="{TEXT}" '
        'office:version="1.3" office:mimetype="application/vnd.oasis.opendocument.spreadsheet">'
        f"<office:body><office:spreadsheet><table:table table:name={quoteattr(sheet)}>"
        + "".join(body)
        + "</table:table></office:spreadsheet></office:body></office:document>\n"
    )


def content_xml(data: bytes) -> bytes:
    """The XML holding the sheets: the file itself (flat ODS) or content.xml of a zipped .ods."""
    if data.startswith(b"PK"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = archive.getinfo("content.xml")
            if info.file_size > MAX_CONTENT_BYTES:
                raise ValueError(f"content.xml is {info.file_size} bytes, more than a task's sheet holds")
            return archive.read(info)
    if len(data) > MAX_CONTENT_BYTES:
        raise ValueError(f"the document is {len(data)} bytes, more than a task's sheet holds")
    return data


def read_cells(data: bytes, *, rows: int = 64, columns: int = 26) -> list[list[Cell]]:
    """The first sheet's values in a `rows` x `columns` grid (None where empty); a float that is a whole
    number comes back as int. Python's expat refuses entity-expansion bombs (billion laughs)."""
    root = ET.fromstring(content_xml(data))
    table = root.find(f".//{{{TABLE}}}table")
    grid: list[list[Cell]] = []
    if table is None:
        return grid
    for row in table.iter(f"{{{TABLE}}}table-row"):
        values: list[Cell] = []
        for cell in row:
            if cell.tag not in (f"{{{TABLE}}}table-cell", f"{{{TABLE}}}covered-table-cell"):
                continue
            repeat = min(int(cell.get(f"{{{TABLE}}}number-columns-repeated", "1")), columns)
            values += [_value(cell)] * repeat
            if len(values) >= columns:
                break
        values = (values + [None] * columns)[:columns]
        for _ in range(min(int(row.get(f"{{{TABLE}}}number-rows-repeated", "1")), rows)):
            grid.append(list(values))
        if len(grid) >= rows:
            break
    return (grid + [[None] * columns for _ in range(rows)])[:rows]


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
