"""Text-editor tasks in Mousepad: edit a seeded text file and save it; the checker reads the file."""

from __future__ import annotations

import random

from envhub_desktop.actions import DesktopAction, Keys, TypeText, Wait
from envhub_desktop.tasks.base import WORDS, Episode, Task, text_is, word_lines

SAVE: list[DesktopAction] = [Keys(("ctrl", "s")), Wait(0.5)]


def append_line(rng: random.Random) -> Episode:
    lines = word_lines(rng, rng.randint(2, 5))
    new = " ".join(rng.sample(WORDS, 4))
    path = "/work/notes.txt"
    return Episode(
        goal=f"In the open text editor, add a new last line reading exactly `{new}` to notes.txt and save "
        "it.",
        files={path: "\n".join(lines) + "\n"},
        app=["mousepad", path],
        window="notes.txt",
        reads=(path,),
        check=text_is([*lines, new], path),
        oracle=[Keys(("ctrl", "End")), TypeText(new + "\n"), Keys(("ctrl", "s")), Wait(0.5)],
    )


def delete_line(rng: random.Random) -> Episode:
    lines = word_lines(rng, rng.randint(3, 6))
    k = rng.randrange(len(lines))
    path = "/work/todo.txt"
    return Episode(
        goal=f"In the open text editor, delete the line `{lines[k]}` from todo.txt (the whole line, nothing "
        "else) and save the file.",
        files={path: "\n".join(lines) + "\n"},
        app=["mousepad", path],
        window="todo.txt",
        reads=(path,),
        check=text_is(lines[:k] + lines[k + 1 :], path),
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
    lines = word_lines(rng, rng.randint(2, 4))
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
        check=text_is(expected, path),
        # Retyping the document is the keyboard-only route that needs no dialog's layout.
        oracle=[Keys(("ctrl", "a")), TypeText("\n".join(expected) + "\n"), Keys(("ctrl", "s")), Wait(0.5)],
    )


def _go_to_line(k: int) -> list[DesktopAction]:
    """The caret to the start of line `k` (0-based)."""
    return [Keys(("ctrl", "Home")), *([Keys(("Down",), k)] if k else []), Keys(("Home",))]


def _seeded(rng: random.Random, path: str, low: int, high: int) -> tuple[list[str], dict[str, str | bytes]]:
    lines = word_lines(rng, rng.randint(low, high))
    return lines, {path: "\n".join(lines) + "\n"}


def insert_after(rng: random.Random) -> Episode:
    path = "/work/list.txt"
    lines, files = _seeded(rng, path, 3, 6)
    k = rng.randrange(len(lines))
    new = " ".join(rng.sample(WORDS, 2))
    return Episode(
        goal=f"In the open text editor, insert a new line reading exactly `{new}` directly after the line "
        f"`{lines[k]}` in list.txt (the other lines unchanged) and save the file.",
        files=files,
        app=["mousepad", path],
        window="list.txt",
        reads=(path,),
        check=text_is([*lines[: k + 1], new, *lines[k + 1 :]], path),
        oracle=[*_go_to_line(k), Keys(("End",)), Keys(("Return",)), TypeText(new), *SAVE],
    )


def swap_lines(rng: random.Random) -> Episode:
    path = "/work/order.txt"
    lines, files = _seeded(rng, path, 3, 6)
    k = rng.randrange(len(lines) - 1)
    swapped = [*lines[:k], lines[k + 1], lines[k], *lines[k + 2 :]]
    return Episode(
        goal=f"In the open text editor, swap the two lines `{lines[k]}` and `{lines[k + 1]}` of order.txt so "
        f"that `{lines[k + 1]}` comes first (the other lines unchanged), and save the file.",
        files=files,
        app=["mousepad", path],
        window="order.txt",
        reads=(path,),
        check=text_is(swapped, path),
        # The first line, cut whole with its newline, pasted below the second.
        oracle=[
            *_go_to_line(k),
            Keys(("shift", "Down")),
            Keys(("ctrl", "x")),
            Keys(("Down",)),
            Keys(("ctrl", "v")),
            *SAVE,
        ],
    )


def uppercase_line(rng: random.Random) -> Episode:
    path = "/work/titles.txt"
    lines, files = _seeded(rng, path, 2, 5)
    k = rng.randrange(len(lines))
    expected = [line.upper() if i == k else line for i, line in enumerate(lines)]
    return Episode(
        goal=f"In the open text editor, change the line `{lines[k]}` of titles.txt to upper case (every "
        "letter a capital, nothing else changed) and save the file.",
        files=files,
        app=["mousepad", path],
        window="titles.txt",
        reads=(path,),
        check=text_is(expected, path),
        oracle=[*_go_to_line(k), Keys(("shift", "End")), TypeText(lines[k].upper()), *SAVE],
    )


def save_as(rng: random.Random) -> Episode:
    folder = f"/work/{rng.choice(['notes', 'drafts', 'letters'])}"
    path = f"{folder}/{rng.choice(WORDS)}.txt"
    lines = word_lines(rng, rng.randint(1, 3))
    return Episode(
        goal=f"The text editor is open on a new, empty document. Write these {len(lines)} line(s) in it: "
        + "; ".join(f"`{line}`" for line in lines)
        + f" (one per line, in this order), then save it as {path} with the editor's save dialog.",
        files={},
        app=["mousepad"],
        window="Untitled",
        reads=(path,),
        check=text_is(lines, path),
        dirs=(folder,),
        # The dialog checks the typed name before it lets Save go: Enter typed at once can be ignored.
        oracle=[
            TypeText("\n".join(lines)),
            Keys(("ctrl", "s")),
            Wait(1.0),
            TypeText(path),
            Wait(1.0),
            Keys(("Return",)),
            Wait(1.0),
        ],
    )


def fix_typo(rng: random.Random) -> Episode:
    path = "/work/letter.txt"
    lines = word_lines(rng, rng.randint(3, 6))
    word = rng.choice(sorted({w for line in lines for w in line.split()}))
    i = rng.randrange(len(word) - 1)
    typo = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    while typo == word or typo in WORDS:  # a double letter swapped with itself: swap elsewhere
        i = rng.randrange(len(word) - 1)
        typo = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    seeded = [" ".join(typo if w == word else w for w in line.split()) for line in lines]
    return Episode(
        goal=f"In the open text editor, letter.txt misspells `{word}` as `{typo}`; correct every "
        f"`{typo}` to `{word}` (e.g. with Search > Find and Replace) and save the file.",
        files={path: "\n".join(seeded) + "\n"},
        app=["mousepad", path],
        window="letter.txt",
        reads=(path,),
        check=text_is(lines, path),
        # The dialog by Tab: search, replacement, six stops to "Replace all in", then its Replace All.
        oracle=[
            Keys(("ctrl", "r")),
            Wait(1.0),
            TypeText(typo),
            Keys(("Tab",)),
            TypeText(word),
            Keys(("Tab",), 6),
            Keys(("space",)),
            Keys(("Tab",), 3),
            Keys(("space",)),
            Wait(0.5),
            Keys(("Escape",)),
            *SAVE,
        ],
    )


TASKS = (
    Task("editor-append-line", "mousepad", "append a given line to a text file and save", append_line),
    Task("editor-delete-line", "mousepad", "delete a named line of a text file and save", delete_line),
    Task("editor-replace-word", "mousepad", "replace a word throughout a text file and save", replace_word),
    Task("editor-insert-after", "mousepad", "insert a line after a named line and save", insert_after),
    Task("editor-swap-lines", "mousepad", "swap two adjacent lines and save", swap_lines),
    Task("editor-uppercase-line", "mousepad", "upper-case one named line and save", uppercase_line),
    Task("editor-save-as", "mousepad", "write a new document and save it through the save dialog", save_as),
    Task("editor-fix-typo", "mousepad", "correct a misspelt word throughout and save", fix_typo),
)
