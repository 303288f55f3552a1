"""saved_by_office on crafted bytes: LibreOffice's own meta passes, anything else (no meta, another
generator, a seed's meta copied unchanged, garbage, bombs) does not, and it never raises."""

from __future__ import annotations

import io
import zipfile

import pytest
from envhub_desktop.odf import fods
from envhub_desktop.provenance import saved_by_office

LO = "LibreOffice/7.4.7.2$Linux_X86_64 LibreOffice_project/40$Build-2"


def flat(meta: str | None, kind: str = "spreadsheet") -> bytes:
    """A flat ODF document with this office:meta body (None: no office:meta at all)."""
    head = "" if meta is None else f"<office:meta>{meta}</office:meta>"
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" '
        'xmlns:dc="http://purl.org/dc/elements/1.1/" office:version="1.3">'
        f"{head}<office:body><office:{kind}/></office:body></office:document>"
    ).encode()


def zipped(meta: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.spreadsheet")
        archive.writestr(
            "meta.xml",
            '<office:document-meta xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
            'xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" '
            'xmlns:dc="http://purl.org/dc/elements/1.1/">'
            f"<office:meta>{meta}</office:meta></office:document-meta>",
        )
    return buffer.getvalue()


def saved(cycles: int, generator: str = LO) -> str:
    return (
        "<dc:date>2026-12-05T05:23:25.398424550</dc:date><meta:editing-duration>PT2S</meta:editing-duration>"
        f"<meta:editing-cycles>{cycles}</meta:editing-cycles><meta:generator>{generator}</meta:generator>"
    )


def test_a_first_save_of_a_seed_without_meta_passes() -> None:
    seed = fods([["item", "cost"]]).encode()
    assert saved_by_office(flat(saved(1)), seeded=seed)
    assert saved_by_office(flat(saved(1)))


def test_a_zipped_document_is_read_from_its_meta_xml() -> None:
    assert saved_by_office(zipped(saved(1)), seeded=fods([["a"]]).encode())
    assert not saved_by_office(zipped(saved(3)), seeded=flat(saved(3)))


def test_editing_cycles_must_move_past_the_seeds() -> None:
    assert saved_by_office(flat(saved(4)), seeded=flat(saved(3)))
    assert not saved_by_office(flat(saved(3)), seeded=flat(saved(3)))  # the seed, unchanged
    assert not saved_by_office(flat(saved(2)), seeded=flat(saved(3)))


@pytest.mark.parametrize(
    "data",
    [
        fods([["item", "cost"], ["tea", 5]]).encode(),  # what a script (or a terminal) would write
        flat(None),
        flat(saved(1, generator="MicrosoftOffice/16.0")),
        flat(saved(1, generator="envhub")),
        flat("<meta:generator>" + LO + "</meta:generator>"),  # no editing-cycles
        flat(saved(1).replace(">1<", ">one<")),
        flat(saved(1).replace(">1<", ">-1<")),
        b"",
        b"PK\x03\x04 not a zip",
        b"\xff\xfe garbage",
        zipped(saved(1)).replace(b"meta.xml", b"mota.xml"),
        b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">'
        b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]><l>&d;</l>',
    ],
)
def test_anything_else_is_not_an_office_save_and_nothing_raises(data: bytes) -> None:
    assert not saved_by_office(data)


def test_the_files_calc_saved_in_the_sandbox_pass() -> None:
    """The office:meta LibreOffice 7.4 wrote (recorded from the sandboxed Calc: first and second save)."""
    first = flat(
        "<dc:date>2026-12-05T05:23:25.398424550</dc:date><meta:editing-duration>PT2S</meta:editing-duration>"
        '<meta:editing-cycles>1</meta:editing-cycles><meta:document-statistic meta:table-count="1" '
        'meta:cell-count="10" meta:object-count="0"/><meta:generator>' + LO + "</meta:generator>"
    )
    second = flat(saved(2))
    assert saved_by_office(first, seeded=fods([["a"]]).encode())
    assert saved_by_office(second, seeded=first)
    assert not saved_by_office(first, seeded=second)
