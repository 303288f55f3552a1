"""Text documents in OpenDocument form: write a task's seeded document, read back what Writer saved.

Seeds are flat ODT (`.fodt`: one XML file, which LibreOffice opens and saves as is), so no office library
is needed to make them; a saved `.odt` is a zip whose `content.xml` holds the body and `styles.xml` the
named styles. The reader turns the body into blocks a checker compares whole: paragraphs (with their
bold/italic runs and style), headings, lists and tables. Bold and italic are resolved the way Writer
applies them: a span's or paragraph's automatic style, its parent styles, and the named styles in
`styles.xml`. Hand-written on the standard library's parser (odfpy reads only zipped documents and does
not resolve inherited text properties); expat refuses entity-expansion bombs, and the sizes it is given
are bounded.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
MAX_XML_BYTES = 32 * 1024 * 1024
"""The most XML the reader parses per part: a task's document is kilobytes; a bigger one is refused."""
MAX_DEPTH = 64
"""How deep the reader follows nested lists, sections and tables (and style parents) before refusing."""


@dataclass(frozen=True)
class Run:
    """A stretch of a paragraph's text with one look."""

    text: str
    bold: bool = False
    italic: bool = False


@dataclass(frozen=True)
class Paragraph:
    """A paragraph or heading: `level` is the heading's outline level (None for body text)."""

    runs: tuple[Run, ...]
    style: str = ""
    """The paragraph style's display name ("Heading 1", "Default Paragraph Style", ...), automatic
    styles followed to the named style they derive from."""
    level: int | None = None

    @property
    def text(self) -> str:
        return "".join(run.text for run in self.runs)

    @property
    def bold(self) -> bool:
        """All of the paragraph's visible text is bold (and it has some)."""
        return _all(self.runs, "bold")

    @property
    def italic(self) -> bool:
        return _all(self.runs, "italic")


@dataclass(frozen=True)
class ListBlock:
    """A list: its items' paragraphs in order (nested lists flattened), `bullet` False when numbered."""

    items: tuple[Paragraph, ...]
    bullet: bool

    @property
    def texts(self) -> list[str]:
        return [item.text for item in self.items]


@dataclass(frozen=True)
class Table:
    """A table's cells' text, row by row (a cell's paragraphs joined with newlines)."""

    rows: tuple[tuple[str, ...], ...]


Block = Paragraph | ListBlock | Table


def _all(runs: Sequence[Run], look: str) -> bool:
    visible = [run for run in runs if run.text.strip()]
    return bool(visible) and all(getattr(run, look) for run in visible)


def fodt(paragraphs: Sequence[str]) -> str:
    """A flat ODT document of plain paragraphs in the default paragraph style."""
    body = "".join(f'<text:p text:style-name="Standard">{escape(p)}</text:p>' for p in paragraphs)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<office:document xmlns:office="{OFFICE}" xmlns:style="{STYLE}" xmlns:text="{TEXT}" '
        f'xmlns:table="{TABLE}" xmlns:fo="{FO}" office:version="1.3" '
        'office:mimetype="application/vnd.oasis.opendocument.text">'
        '<office:styles><style:style style:name="Standard" style:family="paragraph" '
        'style:class="text"/></office:styles>'
        f"<office:body><office:text>{body}</office:text></office:body></office:document>\n"
    )


def parts(data: bytes) -> tuple[bytes, bytes | None]:
    """The XML holding the body and the XML holding the named styles: the file itself twice over for
    flat ODT, content.xml and styles.xml (None when absent) of a zipped .odt. ValueError when too big."""
    if not data.startswith(b"PK"):
        if len(data) > MAX_XML_BYTES:
            raise ValueError(f"the document is {len(data)} bytes, more than a task's document holds")
        return data, None
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        content = _member(archive, "content.xml")
        if content is None:
            raise ValueError("the zip holds no content.xml: it is not an OpenDocument file")
        return content, _member(archive, "styles.xml")


def _member(archive: zipfile.ZipFile, name: str) -> bytes | None:
    try:
        info = archive.getinfo(name)
    except KeyError:
        return None
    if info.file_size > MAX_XML_BYTES:
        raise ValueError(f"{name} is {info.file_size} bytes, more than a task's document holds")
    # zipfile stops at the size the entry declares, so a lying header cannot inflate past the bound.
    return archive.read(info)


def read_blocks(data: bytes) -> list[Block]:
    """The document body's blocks in order (sections unwrapped); ValueError (or the parser's error) when
    the bytes are not a bounded text document."""
    content, styles_xml = parts(data)
    root = ET.fromstring(content)
    styles = _Styles()
    if styles_xml is not None:
        styles.add(ET.fromstring(styles_xml))
    styles.add(root)
    text = root.find(f"{{{OFFICE}}}body/{{{OFFICE}}}text")
    if text is None:
        raise ValueError("no office:text body: not a text document")
    return list(_blocks(text, styles, 0))


def read_text(data: bytes) -> list[str]:
    """Every paragraph's text in reading order (list items and table cells included)."""
    lines: list[str] = []
    for block in read_blocks(data):
        if isinstance(block, Paragraph):
            lines.append(block.text)
        elif isinstance(block, ListBlock):
            lines += block.texts
        else:
            lines += [cell for row in block.rows for cell in row]
    return lines


class _Styles:
    """Paragraph and text styles by name: display name, parent and own bold/italic (None: inherited)."""

    def __init__(self) -> None:
        self.parent: dict[tuple[str, str], str] = {}
        self.display: dict[tuple[str, str], str] = {}
        self.looks: dict[tuple[str, str], dict[str, bool]] = {}
        self.automatic: set[tuple[str, str]] = set()
        self.bullets: dict[str, bool] = {}

    def add(self, root: ET.Element) -> None:
        for container in root.iter():
            if container.tag not in (f"{{{OFFICE}}}styles", f"{{{OFFICE}}}automatic-styles"):
                continue
            automatic = container.tag == f"{{{OFFICE}}}automatic-styles"
            for style in container:
                if style.tag == f"{{{TEXT}}}list-style":
                    self.bullets[style.get(f"{{{STYLE}}}name", "")] = _bulleted(style)
                elif style.tag == f"{{{STYLE}}}style":
                    self._add_style(style, automatic)

    def _add_style(self, style: ET.Element, automatic: bool) -> None:
        key = (style.get(f"{{{STYLE}}}family", ""), style.get(f"{{{STYLE}}}name", ""))
        self.display[key] = style.get(f"{{{STYLE}}}display-name", key[1])
        if parent := style.get(f"{{{STYLE}}}parent-style-name"):
            self.parent[key] = parent
        if automatic:
            self.automatic.add(key)
        props = style.find(f"{{{STYLE}}}text-properties")
        looks: dict[str, bool] = {}
        if props is not None:
            if (weight := props.get(f"{{{FO}}}font-weight")) is not None:
                looks["bold"] = weight == "bold" or (weight.isdigit() and int(weight) >= 600)
            if (posture := props.get(f"{{{FO}}}font-style")) is not None:
                looks["italic"] = posture in ("italic", "oblique")
        self.looks[key] = looks

    def look(self, family: str, name: str | None, look: str) -> bool | None:
        """A style's bold or italic, parents followed; None when no style in the chain sets it."""
        for _ in range(MAX_DEPTH):
            if name is None:
                return None
            key = (family, name)
            if look in self.looks.get(key, {}):
                return self.looks[key][look]
            name = self.parent.get(key)
        raise ValueError("style parents nest deeper than a task's document does")

    def named(self, family: str, name: str | None) -> str:
        """The display name of the named style an automatic style derives from."""
        for _ in range(MAX_DEPTH):
            if name is None:
                return ""
            if (family, name) not in self.automatic:
                return self.display.get((family, name), name)
            name = self.parent.get((family, name))
        raise ValueError("style parents nest deeper than a task's document does")


def _bulleted(list_style: ET.Element) -> bool:
    first = next(iter(list_style), None)
    return first is not None and first.tag == f"{{{TEXT}}}list-level-style-bullet"


def _blocks(parent: ET.Element, styles: _Styles, depth: int) -> Iterator[Block]:
    if depth > MAX_DEPTH:
        raise ValueError("sections nest deeper than a task's document does")
    for child in parent:
        if child.tag in (f"{{{TEXT}}}p", f"{{{TEXT}}}h"):
            yield _paragraph(child, styles)
        elif child.tag == f"{{{TEXT}}}list":
            style = child.get(f"{{{TEXT}}}style-name")
            items = tuple(_list_items(child, styles, depth + 1))
            yield ListBlock(items, styles.bullets.get(style or "", True))
        elif child.tag == f"{{{TABLE}}}table":
            yield Table(tuple(_rows(child, styles, depth + 1)))
        elif child.tag == f"{{{TEXT}}}section":
            yield from _blocks(child, styles, depth + 1)


def _list_items(lst: ET.Element, styles: _Styles, depth: int) -> Iterator[Paragraph]:
    if depth > MAX_DEPTH:
        raise ValueError("lists nest deeper than a task's document does")
    for item in lst:
        if item.tag not in (f"{{{TEXT}}}list-item", f"{{{TEXT}}}list-header"):
            continue
        for child in item:
            if child.tag in (f"{{{TEXT}}}p", f"{{{TEXT}}}h"):
                yield _paragraph(child, styles)
            elif child.tag == f"{{{TEXT}}}list":
                yield from _list_items(child, styles, depth + 1)


def _rows(table: ET.Element, styles: _Styles, depth: int) -> Iterator[tuple[str, ...]]:
    if depth > MAX_DEPTH:
        raise ValueError("tables nest deeper than a task's document does")
    for child in table:
        if child.tag == f"{{{TABLE}}}table-row":
            cells = []
            for cell in child:
                if cell.tag in (f"{{{TABLE}}}table-cell", f"{{{TABLE}}}covered-table-cell"):
                    lines = []
                    for block in _blocks(cell, styles, depth + 1):
                        if isinstance(block, Paragraph):
                            lines.append(block.text)
                    cells.append("\n".join(lines))
            yield tuple(cells)
        elif child.tag in (f"{{{TABLE}}}table-rows", f"{{{TABLE}}}table-header-rows"):
            yield from _rows(child, styles, depth + 1)


def _paragraph(element: ET.Element, styles: _Styles) -> Paragraph:
    name = element.get(f"{{{TEXT}}}style-name")
    base = {look: bool(styles.look("paragraph", name, look)) for look in ("bold", "italic")}
    runs: list[Run] = []
    _runs(element, styles, base, runs, 0)
    merged: list[Run] = []
    for run in runs:  # adjacent runs of one look are one run, however Writer split its spans
        if merged and (merged[-1].bold, merged[-1].italic) == (run.bold, run.italic):
            merged[-1] = Run(merged[-1].text + run.text, run.bold, run.italic)
        elif run.text:
            merged.append(run)
    level = None
    if element.tag == f"{{{TEXT}}}h":
        level = int(element.get(f"{{{TEXT}}}outline-level", "1"))
    return Paragraph(tuple(merged), styles.named("paragraph", name), level)


SPACE_LIKE = {f"{{{TEXT}}}tab": "\t", f"{{{TEXT}}}line-break": "\n"}


def _runs(
    element: ET.Element, styles: _Styles, looks: Mapping[str, bool], out: list[Run], depth: int
) -> None:
    if depth > MAX_DEPTH:
        raise ValueError("spans nest deeper than a task's document does")
    if element.text:
        out.append(Run(element.text, looks["bold"], looks["italic"]))
    for child in element:
        if child.tag == f"{{{TEXT}}}s":
            count = min(int(child.get(f"{{{TEXT}}}c", "1")), 1000)
            out.append(Run(" " * count, looks["bold"], looks["italic"]))
        elif child.tag in SPACE_LIKE:
            out.append(Run(SPACE_LIKE[child.tag], looks["bold"], looks["italic"]))
        elif child.tag in (f"{{{TEXT}}}span", f"{{{TEXT}}}a"):
            name = child.get(f"{{{TEXT}}}style-name")
            inner = dict(looks)
            for look in looks:
                if (value := styles.look("text", name, look)) is not None:
                    inner[look] = value
            _runs(child, styles, inner, out, depth + 1)
        # notes, bookmarks, frames and fields add no body text; their tails below do
        if child.tail:
            out.append(Run(child.tail, looks["bold"], looks["italic"]))
