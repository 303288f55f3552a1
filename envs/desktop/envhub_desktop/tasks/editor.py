"""Text-editor tasks in Mousepad: edit a seeded text file and save it; the checker reads the file."""

from __future__ import annotations

import random

from envhub_desktop.actions import Keys, TypeText, Wait
from envhub_desktop.tasks.base import WORDS, Episode, Task, text_is, word_lines


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


TASKS = (
    Task("editor-append-line", "mousepad", "append a given line to a text file and save", append_line),
    Task("editor-delete-line", "mousepad", "delete a named line of a text file and save", delete_line),
    Task("editor-replace-word", "mousepad", "replace a word throughout a text file and save", replace_word),
)
