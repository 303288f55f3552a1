"""How a document was produced: whether LibreOffice itself saved an OpenDocument file.

A "use the app" task (fill a Calc column, bold a Writer heading) is judged on the file the app saves;
a file with the right cells written some other way (a script, a here-document in a terminal) must not
pass. LibreOffice 7.4 rewrites the document's `office:meta` on every save: `meta:generator` becomes
`LibreOffice/7.4.7.2$Linux_X86_64 LibreOffice_project/...`, `meta:editing-cycles` goes up by one (1
after the first save of a seed that had none, 2 after the next), and `dc:date` and
`meta:editing-duration` are set (observed by saving a seeded flat ODS in the sandboxed Calc twice).

What it proves, and what not: the file's own metadata says LibreOffice saved it after the seed was
written. A program that can write files could write the same metadata (it is plain XML), so this
check alone stops only a lazy forgery (a file written without any meta, like `odf.fods()` output, or a
copy of the seed). The real defence is the desktop itself: an office task's desktop has no terminal,
and macros are disabled in LibreOffice's prepared profile (`envhub_desktop.office`), so the agent has
no way to run code that could forge it.
"""

from __future__ import annotations

import io
import zipfile
from xml.etree import ElementTree as ET

OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
META = "urn:oasis:names:tc:opendocument:xmlns:meta:1.0"
GENERATOR = "LibreOffice/"
"""How LibreOffice's `meta:generator` begins (`LibreOffice/7.4.7.2$Linux_X86_64 ...`)."""
MAX_XML_BYTES = 32 * 1024 * 1024
"""The most XML read: a task's document is kilobytes; a bigger one is not a task's save."""


def saved_by_office(data: bytes, *, seeded: bytes | None = None) -> bool:
    """Whether LibreOffice itself saved this ODF file (flat .fods/.fodt XML or zipped .ods/.odt): its
    meta:generator names LibreOffice and its editing metadata moved past the seed's (editing-cycles
    greater, or present where the seed had none). Never raises: any unreadable file is False."""
    try:
        meta = _meta(data)
        if meta is None:
            return False
        generator = meta.findtext(f"{{{META}}}generator") or ""
        cycles = _cycles(meta)
        if not generator.startswith(GENERATOR) or cycles is None:
            return False
        before = _meta(seeded) if seeded is not None else None
        seed_cycles = _cycles(before) if before is not None else None
        return seed_cycles is None or cycles > seed_cycles
    except (ET.ParseError, zipfile.BadZipFile, KeyError, ValueError, OSError, RuntimeError):
        return False


def _cycles(meta: ET.Element) -> int | None:
    """meta:editing-cycles as a non-negative number, or None when absent or not a number."""
    text = (meta.findtext(f"{{{META}}}editing-cycles") or "").strip()
    return int(text) if text.isdigit() else None


def _meta(data: bytes) -> ET.Element | None:
    """The office:meta element: in the flat document itself, or in a zipped document's meta.xml."""
    if data.startswith(b"PK"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            info = archive.getinfo("meta.xml")
            if info.file_size > MAX_XML_BYTES:
                return None
            xml = archive.read(info)
    elif len(data) > MAX_XML_BYTES:
        return None
    else:
        xml = data
    root = ET.fromstring(xml)  # Python's expat refuses entity-expansion bombs (billion laughs)
    return root.find(f"{{{OFFICE}}}meta")
