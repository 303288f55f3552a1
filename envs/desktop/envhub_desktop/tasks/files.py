"""File-manager tasks in PCManFM: arrange a seeded folder; the checker reads the directory tree and the
content of every file in it (a moved or copied file must arrive intact).

PCManFM runs as `pcmanfm --no-desktop FOLDER` with no D-Bus and no gvfs: its settings are seed files under
the desktop's XDG_CONFIG_HOME (`FM_CONFIG`): delete without the trash (gvfs's trash is absent), no
thumbnails, no status bar (its free-space figure moves with the scratch area's use, and two resets of one
seed must show the same first screen), the icon view (the list view shows modification times).

The oracles are keyboard-only: typing a name selects that item (the view's type-ahead search; Escape
closes its popup and keeps the selection), ctrl+l then a path opens a folder, F2 renames, ctrl+shift+n
and ctrl+alt+n make a folder and an empty file, ctrl+x/c/v move and copy, Delete asks for a
confirmation whose default button is Yes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Literal

from envhub_desktop.actions import DesktopAction, Keys, TypeText, Wait
from envhub_desktop.desktop import STATE_DIR
from envhub_desktop.tasks.base import WORDS, Check, Episode, Saved, Task

FM_CONFIG = {
    f"{STATE_DIR}/config/libfm/libfm.conf": (
        "[config]\nsingle_click=0\nuse_trash=0\nconfirm_del=1\nthumbnail_local=0\n\n"
        "[ui]\nbig_icon_size=48\nsmall_icon_size=24\nshow_thumbnail=0\n"
    ),
    f"{STATE_DIR}/config/pcmanfm/default/pcmanfm.conf": (
        "[config]\nbm_open_method=0\n\n[volume]\nmount_on_startup=0\nmount_removable=0\nautorun=0\n\n"
        "[ui]\nwin_width=900\nwin_height=600\nsplitter_pos=150\nside_pane_mode=1\nview_mode=0\n"
        "show_hidden=0\nsort_type=0\nsort_by=2\nshow_statusbar=0\n"
    ),
}
"""PCManFM's and libfm's settings, written as seed files before the app starts (see the module's doc)."""

FOLDERS = ("inbox", "projects", "reports", "archive", "papers", "downloads")
EXTENSIONS = ("txt", "csv", "md", "log")

Tree = Mapping[str, str | None]
"""A folder's wanted state: relative path -> file content, or None for a directory."""


def _content(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(3, 8))) + "\n"


def _names(rng: random.Random, n: int, exts: tuple[str, ...] = EXTENSIONS) -> list[str]:
    """`n` file names with distinct stems (so no name is a prefix of another's and type-ahead finds it)."""
    return [f"{stem}.{rng.choice(exts)}" for stem in rng.sample(WORDS, n)]


def _tree_is(root: str, expected: Tree) -> Check:
    """The folder holds exactly these entries, and each file exactly its content."""
    want = frozenset(rel + "/" if content is None else rel for rel, content in expected.items())

    def check(saved: Saved) -> bool:
        if saved.trees.get(root) != want:
            return False
        return all(
            saved.files.get(f"{root}/{rel}") == content.encode()
            for rel, content in expected.items()
            if content is not None
        )

    return check


def _episode(goal: str, root: str, start: Tree, end: Tree, oracle: list[DesktopAction]) -> Episode:
    """The episode for a folder seeded as `start` that the task wants to leave as `end`."""
    files: dict[str, str | bytes] = dict(FM_CONFIG)
    files.update({f"{root}/{rel}": content for rel, content in start.items() if content is not None})
    dirs = tuple(f"{root}/{rel}" for rel, content in start.items() if content is None)
    name = root.rsplit("/", 1)[1]
    return Episode(
        goal=f"{goal} Use the open file manager (PCManFM), showing the folder {root}.",
        files=files,
        app=["pcmanfm", "--no-desktop", root],
        window=f"^{name}$",
        reads=tuple(f"{root}/{rel}" for rel, content in end.items() if content is not None),
        check=_tree_is(root, end),
        oracle=oracle,
        trees=(root,),
        dirs=(root, *dirs),
    )


# --- the oracle's steps -------------------------------------------------------------------------------


def select(name: str) -> list[DesktopAction]:
    """Select one item of the open folder by typing its name (type-ahead), then close the search popup."""
    return [TypeText(name), Keys(("Escape",))]


def open_folder(path: str) -> list[DesktopAction]:
    return [Keys(("ctrl", "l")), TypeText(path + "\n"), Wait(0.6)]


def transfer(names: list[str], src: str, dst: str, *, copy: bool = False) -> list[DesktopAction]:
    """Cut (or copy) each of `names` from the folder `src` (open now) and paste it into `dst`, one at a
    time (type-ahead selects one item), going back to `src` between them. An episode has 30 turns by
    default: the steps are few, and the only pauses are where a folder changes (and the last paste)."""
    steps: list[DesktopAction] = []
    for i, name in enumerate(names):
        if i:
            steps += open_folder(src)
        steps += [*select(name), Keys(("ctrl", "c" if copy else "x")), *open_folder(dst), Keys(("ctrl", "v"))]
    return [*steps, Wait(0.8)]


def create(kind: Literal["folder", "file"], name: str) -> list[DesktopAction]:
    """Make a new folder (`kind` "folder") or empty file in the open folder: its name dialog, then a
    pause, since the view selects the new item when it shows and a selection made before that is lost."""
    keys = ("ctrl", "shift", "n") if kind == "folder" else ("ctrl", "alt", "n")
    return [Keys(keys), Wait(0.8), Keys(("ctrl", "a")), TypeText(name + "\n"), Wait(1.5)]


def _seed(rng: random.Random, n: int) -> tuple[str, dict[str, str | None]]:
    root = f"/work/{rng.choice(FOLDERS)}"
    return root, {name: _content(rng) for name in _names(rng, n)}


# --- the tasks ----------------------------------------------------------------------------------------


def rename_file(rng: random.Random) -> Episode:
    root, start = _seed(rng, rng.randint(3, 5))
    old = rng.choice(sorted(start))
    stems = {name.split(".")[0] for name in start}
    new = f"{rng.choice([w for w in WORDS if w not in stems])}.{old.split('.')[1]}"
    end = {(new if name == old else name): content for name, content in start.items()}
    oracle = [*select(old), Keys(("F2",)), Wait(0.6), Keys(("ctrl", "a")), TypeText(new + "\n"), Wait(0.8)]
    return _episode(f"Rename the file `{old}` to `{new}`.", root, start, end, oracle)


def folder_and_move(rng: random.Random) -> Episode:
    root, start = _seed(rng, rng.randint(3, 5))
    moved = sorted(rng.sample(sorted(start), 2))
    stems = {name.split(".")[0] for name in start}
    folder = rng.choice([w for w in WORDS if w not in stems])
    end: dict[str, str | None] = {n: c for n, c in start.items() if n not in moved}
    end[folder] = None
    end.update({f"{folder}/{n}": start[n] for n in moved})
    oracle = [*create("folder", folder), *transfer(moved, root, f"{root}/{folder}")]
    return _episode(
        f"Make a new folder `{folder}` in {root} and move the files `{moved[0]}` and `{moved[1]}` into it.",
        root,
        start,
        end,
        oracle,
    )


def copy_into(rng: random.Random) -> Episode:
    root, start = _seed(rng, rng.randint(2, 4))
    stems = {name.split(".")[0] for name in start}
    sub = rng.choice([w for w in WORDS if w not in stems])
    start[sub] = None
    inside = _names(rng, 1)[0]
    while inside.split(".")[0] in stems | {sub}:
        inside = _names(rng, 1)[0]
    start[f"{sub}/{inside}"] = _content(rng)
    name = rng.choice(sorted(n for n, c in start.items() if "/" not in n and c is not None))
    end = {**start, f"{sub}/{name}": start[name]}
    oracle = transfer([name], root, f"{root}/{sub}", copy=True)
    return _episode(
        f"Copy the file `{name}` into the folder `{sub}` (keep the original where it is).",
        root,
        start,
        end,
        oracle,
    )


def delete_file(rng: random.Random) -> Episode:
    root, start = _seed(rng, rng.randint(3, 5))
    gone = rng.choice(sorted(start))
    end = {n: c for n, c in start.items() if n != gone}
    oracle = [*select(gone), Keys(("Delete",)), Wait(0.6), Keys(("Return",)), Wait(0.8)]
    return _episode(f"Delete the file `{gone}` (only that file).", root, start, end, oracle)


def move_by_extension(rng: random.Random) -> Episode:
    root = f"/work/{rng.choice(FOLDERS)}"
    ext, *others = rng.sample(EXTENSIONS, len(EXTENSIONS))
    stems = rng.sample(WORDS, 6)
    folder = stems.pop()
    k = rng.randint(2, 3)
    names = [f"{s}.{ext}" for s in stems[:k]] + [f"{s}.{rng.choice(others)}" for s in stems[k:]]
    start: dict[str, str | None] = {name: _content(rng) for name in names}
    start[folder] = None
    matching = sorted(names[:k])
    end = {n: c for n, c in start.items() if n not in matching}
    end.update({f"{folder}/{n}": start[n] for n in matching})
    oracle = transfer(matching, root, f"{root}/{folder}")
    return _episode(
        f"Move every `.{ext}` file of {root} into its folder `{folder}`; leave the other files where "
        "they are.",
        root,
        start,
        end,
        oracle,
    )


def new_empty_file(rng: random.Random) -> Episode:
    root, start = _seed(rng, rng.randint(1, 4))
    stems = {name.split(".")[0] for name in start}
    name = f"{rng.choice([w for w in WORDS if w not in stems])}.{rng.choice(EXTENSIONS)}"
    end = {**start, name: ""}
    return _episode(
        f"Create a new empty file named `{name}` in {root}.", root, start, end, create("file", name)
    )


def move_up(rng: random.Random) -> Episode:
    root, start = _seed(rng, rng.randint(1, 3))
    stems = {name.split(".")[0] for name in start}
    sub, stem, other = rng.sample([w for w in WORDS if w not in stems], 3)
    name, left = f"{stem}.{rng.choice(EXTENSIONS)}", f"{other}.{rng.choice(EXTENSIONS)}"
    start.update({sub: None, f"{sub}/{name}": _content(rng), f"{sub}/{left}": _content(rng)})
    end = {n: c for n, c in start.items() if n != f"{sub}/{name}"}
    end[name] = start[f"{sub}/{name}"]
    oracle = [*open_folder(f"{root}/{sub}"), *transfer([name], f"{root}/{sub}", root)]
    return _episode(
        f"Move the file `{name}` out of the folder `{sub}` into {root} itself (the folder above it).",
        root,
        start,
        end,
        oracle,
    )


def rename_folder(rng: random.Random) -> Episode:
    root, start = _seed(rng, rng.randint(1, 3))
    stems = {name.split(".")[0] for name in start}
    old, new = rng.sample([w for w in WORDS if w not in stems], 2)
    inside = {f"{old}/{n}": _content(rng) for n in _names(rng, 2)}
    start.update({old: None, **inside})
    end = {new if n == old else n.replace(f"{old}/", f"{new}/", 1): c for n, c in start.items()}
    oracle = [*select(old), Keys(("F2",)), Wait(0.6), Keys(("ctrl", "a")), TypeText(new + "\n"), Wait(0.8)]
    return _episode(
        f"Rename the folder `{old}` to `{new}` (its files stay inside it).", root, start, end, oracle
    )


TASKS = (
    Task("files-rename", "pcmanfm", "rename a file in a file manager", rename_file),
    Task("files-folder-move", "pcmanfm", "make a folder and move two files into it", folder_and_move),
    Task("files-copy", "pcmanfm", "copy a file into a subfolder, keeping the original", copy_into),
    Task("files-delete", "pcmanfm", "delete one named file", delete_file),
    Task(
        "files-move-by-extension",
        "pcmanfm",
        "move the files of one extension into a folder",
        move_by_extension,
    ),
    Task("files-new-file", "pcmanfm", "create an empty file", new_empty_file),
    Task("files-move-up", "pcmanfm", "move a file from a subfolder to its parent", move_up),
    Task("files-rename-folder", "pcmanfm", "rename a folder that holds files", rename_folder),
)
