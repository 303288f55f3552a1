"""Word-processor tasks in LibreOffice Writer: edit a seeded flat-ODT document and save it; the checker
reads the saved document's blocks (paragraphs, headings, lists, tables) and requires LibreOffice's own
save metadata, since each task says to use Writer.

Oracles are keyboard first, as a person fluent in Writer works: ctrl+Down walks paragraph by paragraph,
ctrl+b bolds, ctrl+1 applies Heading 1, shift+F12 the bulleted list, ctrl+F12 the Insert Table dialog,
ctrl+h Find and Replace (alt+p its Replace field, alt+l Replace All), ctrl+shift+s Save As (Tab to its
file type list, whose entries are picked by typing their names). Text the oracle types starts with a
capital (autocorrect capitalises a table cell's first letter) and no word of a seed or an answer is 8
letters long, the shortest word Writer's word completion collects, so no suggestion is accepted by a
Return.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from envhub_desktop.actions import DesktopAction, Keys, TypeText, Wait
from envhub_desktop.odt import Block, ListBlock, Paragraph, fodt, read_blocks
from envhub_desktop.office import OFFICE_OPTIONS
from envhub_desktop.provenance import saved_by_office
from envhub_desktop.tasks.base import WORDS, Check, Episode, Saved, Task

Shape = tuple[object, ...]
"""A block as the checkers compare it: ("p", text, look) with look "plain", "bold" or "mixed",
("h", level, text), ("list", bullet, texts, every item plain) or ("table", rows)."""
SAVE: list[DesktopAction] = [Keys(("ctrl", "s")), Wait(2.0)]
OTHER_WORDS = ("Ocean", "Granite", "Thistle", "Beacon", "Juniper", "Cobalt", "Prairie", "Glacier")
"""Words no seed holds (WORDS are lower case), for text the task adds."""


def writer(path: str) -> list[str]:
    return ["soffice", "--writer", *OFFICE_OPTIONS, path]


def _sentence(rng: random.Random, n: int = 4) -> str:
    return " ".join(rng.sample(WORDS, n)).capitalize() + "."


def _paragraphs(rng: random.Random, low: int = 3, high: int = 5) -> list[str]:
    return [_sentence(rng) for _ in range(rng.randint(low, high))]


def _look(paragraph: Paragraph) -> str:
    if paragraph.bold and not any(run.italic for run in paragraph.runs):
        return "bold"
    plain = not any(run.bold or run.italic for run in paragraph.runs if run.text.strip())
    return "plain" if plain else "mixed"


def shapes(blocks: list[Block]) -> list[Shape]:
    """The blocks as compared: empty body paragraphs dropped (Writer leaves one after a table)."""
    out: list[Shape] = []
    for block in blocks:
        if isinstance(block, Paragraph):
            if block.level is not None:
                out.append(("h", block.level, block.text))
            elif block.text.strip():
                out.append(("p", block.text, _look(block)))
        elif isinstance(block, ListBlock):
            looks = {_look(item) for item in block.items}
            out.append(("list", block.bullet, tuple(block.texts), looks == {"plain"}))
        else:
            out.append(("table", block.rows))
    return out


def plain(texts: list[str]) -> list[Shape]:
    return [("p", text, "plain") for text in texts]


def _document_is(expected: list[Shape], path: str, seed: str, *, zipped: bool = False) -> Check:
    """The saved document at `path` holds exactly these blocks, and LibreOffice saved it (as a zipped
    .odt when `zipped`, not the flat XML the seed is)."""

    def check(saved: Saved) -> bool:
        data = saved.files.get(path)
        if data is None or not saved_by_office(data, seeded=seed.encode()):
            return False
        if zipped and not data.startswith(b"PK"):
            return False
        try:
            return shapes(read_blocks(data)) == expected
        except Exception:  # not a text document any more: the task failed
            return False

    return check


def _to_paragraph(k: int) -> list[DesktopAction]:
    """The caret to the start of paragraph `k` (from 0)."""
    return [Keys(("ctrl", "Home")), *([Keys(("ctrl", "Down"), k)] if k else [])]


def _episode(
    path: str,
    seed: list[str],
    goal: str,
    expected: list[Shape],
    oracle: list[DesktopAction],
) -> Episode:
    name = path.rsplit("/", 1)[1]
    document = fodt(seed)
    return Episode(
        goal=f"In LibreOffice Writer, which has {name} open: {goal}",
        files={path: document},
        app=writer(path),
        window=name.split(".")[0],
        reads=(path,),
        check=_document_is(expected, path, document),
        oracle=oracle,
    )


def append_paragraph(rng: random.Random) -> Episode:
    seed = _paragraphs(rng)
    new = " ".join(rng.sample(OTHER_WORDS, 3)).capitalize() + "."
    return _episode(
        "/work/letter.fodt",
        seed,
        f"add a new last paragraph reading exactly `{new}` (plain text, after the others), then save the "
        "document in its own format (ctrl+s).",
        plain([*seed, new]),
        [Keys(("ctrl", "End")), Keys(("Return",)), TypeText(new), *SAVE],
    )


def replace_word(rng: random.Random) -> Episode:
    old = rng.choice(WORDS)
    others = [w for w in WORDS if w != old]
    seed: list[str] = []
    for _ in range(rng.randint(3, 5)):
        words = rng.sample(others, 4)
        if rng.random() < 0.7 or not seed:  # never first in a sentence: the seed's capital would differ
            words.insert(rng.randint(1, 4), old)
        seed.append(" ".join(words).capitalize() + ".")
    new = rng.choice(OTHER_WORDS).lower()
    expected = [" ".join(new if w == old else w for w in s.removesuffix(".").split()) + "." for s in seed]
    return _episode(
        "/work/memo.fodt",
        seed,
        f"replace every occurrence of the word `{old}` with `{new}` (Edit > Find and Replace, ctrl+h), then "
        "save the document in its own format (ctrl+s).",
        plain(expected),
        [
            Keys(("ctrl", "h")),
            Wait(2.0),
            TypeText(old),
            Keys(("alt", "p")),
            TypeText(new),
            Keys(("alt", "l")),
            Wait(1.0),
            Keys(("Escape",)),
            Wait(0.5),
            *SAVE,
        ],
    )


def bold_paragraph(rng: random.Random) -> Episode:
    seed = _paragraphs(rng)
    k = rng.randrange(len(seed))
    expected = plain(seed)
    expected[k] = ("p", seed[k], "bold")
    return _episode(
        "/work/report.fodt",
        seed,
        f"make the whole paragraph `{seed[k]}` bold (and nothing else), then save the document in its own "
        "format (ctrl+s).",
        expected,
        [*_to_paragraph(k), Keys(("shift", "ctrl", "Down")), Keys(("ctrl", "b")), *SAVE],
    )


def bullet_list(rng: random.Random) -> Episode:
    seed = _paragraphs(rng, 4, 6)
    first = rng.randrange(len(seed) - 2)
    count = rng.randint(2, min(3, len(seed) - first))
    items = seed[first : first + count]
    expected = [*plain(seed[:first]), ("list", True, tuple(items), True), *plain(seed[first + count :])]
    return _episode(
        "/work/agenda.fodt",
        seed,
        f"turn the {count} paragraphs from `{items[0]}` to `{items[-1]}` into one bulleted list (one item "
        "each; the other paragraphs stay as they are), then save the document in its own format (ctrl+s).",
        expected,
        [
            *_to_paragraph(first),
            Keys(("shift", "ctrl", "Down"), count),
            Keys(("shift", "F12")),
            *SAVE,
        ],
    )


def heading(rng: random.Random) -> Episode:
    seed = _paragraphs(rng)
    title = " ".join(rng.sample(OTHER_WORDS, 2))
    return _episode(
        "/work/essay.fodt",
        seed,
        f"add a heading `{title}` above the first paragraph, in the Heading 1 paragraph style, then save the "
        "document in its own format (ctrl+s).",
        [("h", 1, title), *plain(seed)],
        [
            Keys(("ctrl", "Home")),
            Keys(("Return",)),
            Keys(("Up",)),
            TypeText(title),
            Keys(("ctrl", "1")),
            *SAVE,
        ],
    )


def delete_paragraph(rng: random.Random) -> Episode:
    seed = _paragraphs(rng, 3, 6)
    k = rng.randrange(len(seed) - 1)
    return _episode(
        "/work/minutes.fodt",
        seed,
        f"delete the paragraph `{seed[k]}` (the whole paragraph, nothing else), then save the document in "
        "its own format (ctrl+s).",
        plain(seed[:k] + seed[k + 1 :]),
        [
            *_to_paragraph(k),
            Keys(("shift", "ctrl", "Down")),
            Keys(("shift", "Right")),  # over the paragraph's end too, so the next one moves up
            Keys(("Delete",)),
            *SAVE,
        ],
    )


def insert_table(rng: random.Random) -> Episode:
    seed = _paragraphs(rng, 2, 4)
    names = rng.sample(OTHER_WORDS, 3)
    rows = (("Item", "Count"), (names[0], str(rng.randint(2, 99))))
    cells = [cell for row in rows for cell in row]
    typing: list[DesktopAction] = []
    for i, cell in enumerate(cells):
        typing += [TypeText(cell), *([Keys(("Tab",))] if i < len(cells) - 1 else [])]
    return _episode(
        "/work/inventory.fodt",
        seed,
        "insert a table of 2 columns and 2 rows after the last paragraph (Table > Insert Table, ctrl+F12) "
        f"holding `{rows[0][0]}` | `{rows[0][1]}` in its first row and `{rows[1][0]}` | `{rows[1][1]}` "
        "in its second, then save the document in its own format (ctrl+s).",
        [*plain(seed), ("table", rows)],
        [
            Keys(("ctrl", "End")),
            Keys(("Return",)),
            Keys(("ctrl", "F12")),
            Wait(2.0),
            Keys(("Return",)),  # the dialog's default: 2 x 2
            Wait(1.0),
            *typing,
            *SAVE,
        ],
    )


def _save_as(name: str, kind: str) -> list[DesktopAction]:
    """File > Save As (ctrl+shift+s): the name typed over the proposed one, the file type picked by
    typing its entry's name in the list (Tab from the name field), then Save."""
    return [
        Keys(("ctrl", "shift", "s")),
        Wait(2.0),
        Keys(("ctrl", "a")),
        TypeText(name),
        Keys(("Tab",)),
        TypeText(kind),
        Keys(("Return",)),
        Wait(1.5),
    ]


def save_as_text(rng: random.Random) -> Episode:
    """Plain text carries no producer metadata, so this checker reads only the lines: the Writer desktop
    has no terminal and LibreOffice's macros are off, which leaves Save As the way to write the file."""
    seed = _paragraphs(rng)
    path, target = "/work/story.fodt", "/work/story.txt"
    document = fodt(seed)

    def check(saved: Saved) -> bool:
        text = saved.text(target)
        return text is not None and text.removeprefix("\ufeff").removesuffix("\n").split("\n") == seed

    return Episode(
        goal="In LibreOffice Writer, which has story.fodt open: save a copy of the document as plain text, "
        "story.txt in the same folder (File > Save As, file type `Text (.txt)`; keep that format when "
        "asked).",
        files={path: document},
        app=writer(path),
        window="story",
        reads=(target,),
        check=check,
        # The format question's default button keeps the text format.
        oracle=[*_save_as("story", "Text (.txt)"), Keys(("Return",)), Wait(2.0)],
    )


def save_as_odt(rng: random.Random) -> Episode:
    seed = _paragraphs(rng)
    new = " ".join(rng.sample(OTHER_WORDS, 3)).capitalize() + "."
    name = rng.choice(["final", "summary", "release"])
    path, target = "/work/draft.fodt", f"/work/{name}.odt"
    document = fodt(seed)
    expected = [("p", new, "plain"), *plain(seed)]
    return Episode(
        goal="In LibreOffice Writer, which has draft.fodt open: add a first paragraph reading exactly "
        f"`{new}` above the others, then save the document as {name}.odt in the same folder, in the ODF Text "
        "Document format (File > Save As, file type `ODF Text Document (.odt)`).",
        files={path: document},
        app=writer(path),
        window="draft",
        reads=(target,),
        check=_document_is(expected, target, document, zipped=True),
        oracle=[
            Keys(("ctrl", "Home")),
            Keys(("Return",)),
            Keys(("Up",)),
            TypeText(new),
            *_save_as(name, "ODF Text Document (.odt)"),
            Wait(0.5),
        ],
    )


def _task(name: str, summary: str, build: Callable[[random.Random], Episode]) -> Task:
    return Task(name, "libreoffice-writer", summary, build)


TASKS = (
    _task("writer-append-paragraph", "add a last paragraph to a document and save it", append_paragraph),
    _task("writer-replace-word", "replace a word everywhere through Find and Replace and save", replace_word),
    _task("writer-bold-paragraph", "make one paragraph bold and save", bold_paragraph),
    _task("writer-bullet-list", "turn consecutive paragraphs into a bulleted list and save", bullet_list),
    _task("writer-heading", "add a Heading 1 above the first paragraph and save", heading),
    _task("writer-delete-paragraph", "delete one paragraph and save", delete_paragraph),
    _task("writer-insert-table", "insert a 2x2 table with given text and save", insert_table),
    _task("writer-save-as-text", "save a copy of the document as plain text through Save As", save_as_text),
    _task("writer-save-as-odt", "edit, then save as a zipped .odt through Save As", save_as_odt),
)
