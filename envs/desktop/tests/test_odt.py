"""The text-document reader on crafted bytes (no desktop): the seeds it writes read back, Writer's ways of
marking bold, italic, headings, lists and tables are resolved, and garbage, bombs and missing parts end
in an error the checkers turn into 0, never in a hang or a huge allocation."""

from __future__ import annotations

import io
import struct
import zipfile
from xml.etree import ElementTree as ET

import pytest
from envhub_desktop.odt import (
    FO,
    MAX_XML_BYTES,
    OFFICE,
    STYLE,
    TABLE,
    TEXT,
    ListBlock,
    Paragraph,
    Run,
    Table,
    fodt,
    read_blocks,
    read_text,
)

NS = (
    f'xmlns:office="{OFFICE}" xmlns:style="{STYLE}" xmlns:text="{TEXT}" xmlns:table="{TABLE}" xmlns:fo="{FO}"'
)


def document(body: str, automatic: str = "", styles: str = "") -> bytes:
    """A flat ODT shaped like Writer's saves: named styles, automatic styles, then the body."""
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document {NS}>'
        f"<office:styles>{styles}</office:styles>"
        f"<office:automatic-styles>{automatic}</office:automatic-styles>"
        f"<office:body><office:text><text:sequence-decls/>{body}</office:text></office:body>"
        "</office:document>"
    ).encode()


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_seed_reads_back_as_its_plain_paragraphs() -> None:
    seed = fodt(["Apple river & stone.", "Cloud <maple>."])
    blocks = read_blocks(seed.encode())
    assert blocks == [
        Paragraph((Run("Apple river & stone."),), "Standard"),
        Paragraph((Run("Cloud <maple>."),), "Standard"),
    ]
    assert read_text(seed.encode()) == ["Apple river & stone.", "Cloud <maple>."]


def test_bold_and_italic_come_from_automatic_styles_and_their_named_parents() -> None:
    automatic = (
        '<style:style style:name="P1" style:family="paragraph" style:parent-style-name="Quote"/>'
        '<style:style style:name="P2" style:family="paragraph" style:parent-style-name="Standard">'
        '<style:text-properties fo:font-weight="bold"/></style:style>'
        '<style:style style:name="T1" style:family="text"><style:text-properties fo:font-style="italic"/>'
        "</style:style>"
        '<style:style style:name="T2" style:family="text"><style:text-properties fo:font-weight="normal"/>'
        "</style:style>"
    )
    styles = (
        '<style:style style:name="Standard" style:family="paragraph"/>'
        '<style:style style:name="Quote" style:display-name="Big Quote" style:family="paragraph" '
        'style:parent-style-name="Standard"><style:text-properties fo:font-weight="700"/></style:style>'
    )
    body = (
        '<text:p text:style-name="P1">All bold by the named parent.</text:p>'
        '<text:p text:style-name="P2">Bold <text:span text:style-name="T1">and italic</text:span>'
        '<text:span text:style-name="T2"> then not</text:span></text:p>'
        '<text:p text:style-name="Standard">Plain <text:span text:style-name="T1">word</text:span>.</text:p>'
    )
    first, second, third = read_blocks(document(body, automatic, styles))
    assert isinstance(first, Paragraph) and first.bold and first.style == "Big Quote"
    assert isinstance(second, Paragraph) and not second.bold and second.style == "Standard"
    assert second.runs == (Run("Bold ", True), Run("and italic", True, True), Run(" then not"))
    assert isinstance(third, Paragraph)
    assert third.runs == (Run("Plain "), Run("word", italic=True), Run("."))


def test_headings_lists_tables_sections_and_spaces_read_as_blocks() -> None:
    automatic = (
        '<text:list-style style:name="L1"><text:list-level-style-bullet text:level="1"/></text:list-style>'
        '<text:list-style style:name="L2"><text:list-level-style-number text:level="1"/></text:list-style>'
    )
    body = (
        '<text:h text:style-name="Heading_20_1" text:outline-level="1">Title</text:h>'
        '<text:list text:style-name="L1"><text:list-item><text:p>One</text:p></text:list-item>'
        "<text:list-item><text:list><text:list-item><text:p>Nested</text:p></text:list-item></text:list>"
        "</text:list-item></text:list>"
        '<text:list text:style-name="L2"><text:list-item><text:p>First</text:p></text:list-item></text:list>'
        "<table:table><table:table-column/><table:table-row><table:table-cell><text:p>A1</text:p>"
        "</table:table-cell><table:table-cell><text:p>B1</text:p><text:p>more</text:p></table:table-cell>"
        "</table:table-row></table:table>"
        '<text:section><text:p>Two<text:s text:c="3"/>spaces<text:tab/>tab<text:bookmark text:name="x"/>'
        "!</text:p></text:section>"
    )
    blocks = read_blocks(
        document(
            body,
            automatic,
            '<style:style style:name="Heading_20_1" style:display-name="Heading 1" '
            'style:family="paragraph"/>',
        )
    )
    heading, bullets, numbered, table, last = blocks
    assert isinstance(heading, Paragraph) and (heading.level, heading.text) == (1, "Title")
    assert heading.style == "Heading 1"
    assert isinstance(bullets, ListBlock) and bullets.bullet and bullets.texts == ["One", "Nested"]
    assert isinstance(numbered, ListBlock) and not numbered.bullet and numbered.texts == ["First"]
    assert table == Table((("A1", "B1\nmore"),))
    assert isinstance(last, Paragraph) and last.text == "Two   spaces\ttab!"


def test_a_zipped_odt_reads_its_content_with_the_named_styles_of_styles_xml() -> None:
    styles = (
        f'<office:document-styles {NS}><office:styles><style:style style:name="Strong" '
        'style:family="text"><style:text-properties fo:font-weight="bold"/></style:style>'
        "</office:styles></office:document-styles>"
    )
    content = (
        f"<office:document-content {NS}><office:body><office:text>"
        '<text:p><text:span text:style-name="Strong">Loud</text:span></text:p>'
        "</office:text></office:body></office:document-content>"
    )
    data = zipped(
        {
            "mimetype": b"application/vnd.oasis.opendocument.text",
            "content.xml": content.encode(),
            "styles.xml": styles.encode(),
        }
    )
    (paragraph,) = read_blocks(data)
    assert isinstance(paragraph, Paragraph) and paragraph.bold and paragraph.text == "Loud"
    without_styles = zipped({"content.xml": content.encode()})
    (plain,) = read_blocks(without_styles)
    assert isinstance(plain, Paragraph) and not plain.bold


BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
    + "".join(f'<!ENTITY {chr(98 + i)} "' + f"&{chr(97 + i)};" * 10 + '">' for i in range(9))
    + f"]><office:document {NS}><office:body><office:text><text:p>&j;</text:p></office:text>"
    "</office:body></office:document>"
).encode()
DEEP_SECTIONS = document("<text:section>" * 5000 + "<text:p>deep</text:p>" + "</text:section>" * 5000)
STYLE_CYCLE = document(
    '<text:p text:style-name="P1">loop</text:p>',
    '<style:style style:name="P1" style:family="paragraph" style:parent-style-name="P2"/>'
    '<style:style style:name="P2" style:family="paragraph" style:parent-style-name="P1"/>',
)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\xff\xfe garbage",
        b"PK\x03\x04 not really a zip",
        zipped({"meta.xml": b"<x/>"}),  # no content.xml
        zipped({"content.xml": b"<unclosed"}),
        f"<office:document {NS}><office:body><office:spreadsheet/></office:body></office:document>".encode(),
        BILLION_LAUGHS,
        DEEP_SECTIONS,
        STYLE_CYCLE,
        b"<a>" + b" " * (MAX_XML_BYTES + 1) + b"</a>",
    ],
    ids=[
        "empty",
        "binary",
        "fake-zip",
        "no-content",
        "broken-xml",
        "spreadsheet",
        "billion-laughs",
        "deep-nesting",
        "style-cycle",
        "too-big",
    ],
)
def test_bytes_that_are_not_a_bounded_text_document_raise(data: bytes) -> None:
    with pytest.raises((ValueError, ET.ParseError, zipfile.BadZipFile)):
        read_blocks(data)


def test_a_zip_bomb_is_refused_by_its_declared_size_before_inflating() -> None:
    bomb = zipped({"content.xml": b"<" + b"a" * (MAX_XML_BYTES + 10) + b"/>"})
    assert len(bomb) < 200_000
    with pytest.raises(ValueError, match=r"content\.xml is .* bytes"):
        read_blocks(bomb)


def test_a_zip_whose_header_understates_the_size_is_not_inflated_past_it() -> None:
    """The sizes patched down to 100 bytes in both headers: reading stops there and fails the CRC."""
    real = b"<x>" + b"a" * 10_000_000 + b"</x>"
    data = bytearray(zipped({"content.xml": real}))
    size = struct.pack("<I", len(real))
    for at in (i for i in range(len(data) - 3) if data[i : i + 4] == size):
        data[at : at + 4] = struct.pack("<I", 100)
    with pytest.raises((zipfile.BadZipFile, ET.ParseError, ValueError)):
        read_blocks(bytes(data))
