"""Terminal tasks in xterm: a bash shell in /work; any route through the shell counts, and the checker
reads only the files, directory trees and file modes left behind."""

from __future__ import annotations

import io
import random
import tarfile
import zlib
from collections.abc import Mapping

from envhub_desktop.actions import DesktopAction, TypeText, Wait
from envhub_desktop.tasks.base import WORDS, Check, Episode, Saved, Task, text_is, word_lines

TITLE = "Terminal"
XTERM = ["xterm", "-T", TITLE, "-geometry", "100x30", "-e", "bash", "--norc", "--noprofile"]
"""xterm titled `Terminal` (the window regex) running bash without rc files: the sandbox's HOME is /work,
which holds only the seeded files, so no prompt or alias differs between episodes."""
WINDOW = f"^{TITLE}$"
ANY_ROUTE = "Any route counts: use whatever shell commands you like."
MAX_ARCHIVE_MEMBERS = 64
"""A tar with more members than this fails the check unread (the task's archive has a handful)."""
MAX_ARCHIVE_BYTES = 1 << 20
"""An archive that unpacks to more than this fails the check; the task's is a few kB (no bomb is
unpacked whole)."""


def shell(*commands: str, wait: float = 1.0) -> list[DesktopAction]:
    """The oracle: each command typed into the terminal, then a pause for the shell to run them."""
    return [*(TypeText(command + "\n") for command in commands), Wait(wait)]


def terminal_episode(
    goal: str,
    *,
    files: Mapping[str, str],
    reads: tuple[str, ...],
    check: Check,
    oracle: list[DesktopAction],
    trees: tuple[str, ...] = (),
    dirs: tuple[str, ...] = (),
    modes: tuple[str, ...] = (),
) -> Episode:
    """An episode played in the terminal, with the any-route sentence after the goal."""
    return Episode(
        goal=f"In the open terminal (xterm, bash in /work), {goal} {ANY_ROUTE}",
        files=files,
        app=XTERM,
        window=WINDOW,
        reads=reads,
        check=check,
        oracle=oracle,
        trees=trees,
        dirs=dirs,
        modes=modes,
    )


def _names(rng: random.Random, n: int) -> list[str]:
    return rng.sample(WORDS, n)


def make_tree(rng: random.Random) -> Episode:
    root = rng.choice(["project", "site", "archive", "course"])
    top = _names(rng, rng.randint(2, 4))
    paths = [*top]
    for parent in rng.sample(top, rng.randint(1, len(top))):
        child = rng.choice([w for w in WORDS if w not in top])
        paths.append(f"{parent}/{child}")
        if rng.random() < 0.5:
            paths.append(f"{parent}/{child}/{rng.choice(WORDS)}")
    listed = ", ".join(f"`{p}`" for p in paths)
    expected = frozenset(f"{p}/" for p in paths)
    return terminal_episode(
        f"create the directories {listed} inside the empty folder /work/{root} (nothing else in it).",
        files={},
        dirs=(f"/work/{root}",),
        trees=(f"/work/{root}",),
        reads=(),
        check=lambda saved: saved.trees.get(f"/work/{root}") == expected,
        oracle=shell(f"cd {root} && mkdir -p {' '.join(paths)} && cd .."),
    )


def _one_of(values: set[str], path: str) -> Check:
    return lambda saved: saved.text(path) in values


def count_lines(rng: random.Random) -> Episode:
    n = rng.randint(20, 400)
    name = rng.choice(["sales", "visits", "orders", "readings"])
    rows = [f"{rng.randrange(10_000)},{rng.choice(WORDS)},{rng.randrange(100)}" for _ in range(n)]
    data, out = f"/work/data/{name}.csv", "/work/count.txt"
    return terminal_episode(
        f"write the number of lines of data/{name}.csv (as `wc -l` counts them) into /work/count.txt: "
        "only the number, on one line.",
        files={data: "\n".join(rows) + "\n"},
        reads=(out,),
        check=_one_of({str(n), f"{n}\n"}, out),
        oracle=shell(f"wc -l < data/{name}.csv > count.txt"),
    )


def sort_unique(rng: random.Random) -> Episode:
    distinct = _names(rng, rng.randint(4, 9))
    words = distinct + [rng.choice(distinct) for _ in range(rng.randint(5, 15))]
    rng.shuffle(words)
    data, out = "/work/words.txt", "/work/unique.txt"
    return terminal_episode(
        "write the distinct words of words.txt, sorted alphabetically, one per line and each once, into "
        "/work/unique.txt.",
        files={data: "\n".join(words) + "\n"},
        reads=(out,),
        check=text_is(sorted(distinct), out),
        oracle=shell("sort -u words.txt > unique.txt"),
    )


def grep_log(rng: random.Random) -> Episode:
    levels = ["INFO"] * 5 + ["WARN"] * 2 + ["ERROR"] * 2
    n = rng.randint(12, 30)
    forced = rng.randrange(n)  # every episode has at least one line to find
    lines = [
        f"2026-03-{1 + i // 10:02d} 10:{i:02d}:{rng.randrange(60):02d} "
        f"{'ERROR' if i == forced else rng.choice(levels)} {' '.join(_names(rng, 3))}"
        for i in range(n)
    ]
    errors = [line for line in lines if line.split()[2] == "ERROR"]
    data, out = "/work/logs/app.log", "/work/errors.txt"
    return terminal_episode(
        "copy every line of logs/app.log whose level is ERROR (the third field), whole and in their order, "
        "into /work/errors.txt; no other lines.",
        files={data: "\n".join(lines) + "\n"},
        reads=(out,),
        check=text_is(errors, out),
        oracle=shell("grep ' ERROR ' logs/app.log > errors.txt"),
    )


def _files_are(tree: str, expected: Mapping[str, str]) -> Check:
    """The folder holds exactly these files (relative name -> text), and no directory."""

    def check(saved: Saved) -> bool:
        if saved.trees.get(tree) != frozenset(expected):
            return False
        return all(saved.text(f"{tree}/{name}") == text for name, text in expected.items())

    return check


def rename_ext(rng: random.Random) -> Episode:
    names = _names(rng, rng.randint(3, 6))
    keep = rng.sample(names, rng.randint(1, 2))
    texts = {name: "\n".join(word_lines(rng, 2)) + "\n" for name in names}
    before = {(f"{n}.log" if n in keep else f"{n}.txt"): texts[n] for n in names}
    after = {(f"{n}.log" if n in keep else f"{n}.md"): texts[n] for n in names}
    tree = "/work/notes"
    return terminal_episode(
        "rename every file in /work/notes whose name ends in `.txt` so that it ends in `.md` instead "
        "(`a.txt` becomes `a.md`); leave the other files and every file's content as they are.",
        files={f"{tree}/{name}": text for name, text in before.items()},
        trees=(tree,),
        reads=tuple(f"{tree}/{name}" for name in after),
        check=_files_are(tree, after),
        oracle=shell('cd notes && for f in *.txt; do mv "$f" "${f%.txt}.md"; done; cd ..'),
    )


def gunzip(data: bytes) -> bytes | None:
    """One whole gzip member and nothing after it (as `tar xzf` wants), at most MAX_ARCHIVE_BYTES
    unpacked; None otherwise."""
    unpack = zlib.decompressobj(wbits=31)  # 31: the gzip container, nothing else
    try:
        raw = unpack.decompress(data, MAX_ARCHIVE_BYTES)
    except zlib.error:
        return None
    return raw if unpack.eof and not unpack.unused_data and not unpack.unconsumed_tail else None


def _archive_holds(path: str, expected: Mapping[str, str], dirs: frozenset[str]) -> Check:
    """A gzip tar holding exactly these files (member name -> text) and no other file; directory members
    only of these directories."""

    def check(saved: Saved) -> bool:
        data = saved.files.get(path)
        raw = gunzip(data) if data is not None else None
        if raw is None:
            return False
        found: dict[str, str] = {}
        try:
            with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
                for count, member in enumerate(tar):
                    name = member.name.removeprefix("./").rstrip("/")
                    if count >= MAX_ARCHIVE_MEMBERS or name in found:
                        return False
                    if member.isdir() and name in dirs:
                        continue
                    want = expected.get(name)
                    if not member.isfile() or want is None or member.size != len(want.encode()):
                        return False
                    stream = tar.extractfile(member)
                    if stream is None:
                        return False
                    found[name] = stream.read(member.size).decode()
        except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError, ValueError):
            return False
        return found == dict(expected)

    return check


def archive(rng: random.Random) -> Episode:
    folder = rng.choice(["report", "photos", "letters", "drafts"])
    sub = rng.choice(WORDS)
    names = _names(rng, rng.randint(2, 4))
    content = {f"{folder}/{name}.txt": "\n".join(word_lines(rng, 3)) + "\n" for name in names}
    content[f"{folder}/{sub}/notes.txt"] = " ".join(_names(rng, 4)) + "\n"
    out = f"/work/{folder}.tar.gz"
    return terminal_episode(
        f"pack the folder /work/{folder} into a gzip-compressed tar archive /work/{folder}.tar.gz whose "
        f"members are named `{folder}/...` (as `tar czf {folder}.tar.gz {folder}` run in /work makes).",
        files={f"/work/{name}": text for name, text in content.items()},
        reads=(out,),
        check=_archive_holds(out, content, frozenset({folder, f"{folder}/{sub}"})),
        oracle=shell(f"tar czf {folder}.tar.gz {folder}"),
    )


def _modes_are(expected: Mapping[str, int]) -> Check:
    return lambda saved: all(saved.modes.get(path) == mode for path, mode in expected.items())


def fix_modes(rng: random.Random) -> Episode:
    scripts = [f"/work/bin/{name}.sh" for name in _names(rng, rng.randint(1, 3))]
    secret = f"/work/{rng.choice(['token', 'password', 'key'])}.txt"
    other = f"/work/bin/{rng.choice(['README', 'notes', 'LICENSE'])}"
    files: dict[str, str] = {path: f"#!/bin/sh\necho {rng.choice(WORDS)}\n" for path in scripts}
    files[secret] = f"{rng.randrange(10**12):012d}\n"
    files[other] = " ".join(_names(rng, 5)) + "\n"
    expected = {**{path: 0o755 for path in scripts}, secret: 0o600, other: 0o644}
    relative = " ".join(path.removeprefix("/work/") for path in scripts)
    return terminal_episode(
        f"give the scripts {relative} mode 755 (rwxr-xr-x) and {secret.removeprefix('/work/')} mode 600 "
        f"(rw-------); leave {other.removeprefix('/work/')} at 644.",
        files=files,
        reads=(),
        modes=tuple(expected),
        check=_modes_are(expected),
        oracle=shell(f"chmod 755 {relative} && chmod 600 {secret.removeprefix('/work/')}"),
    )


def edit_config(rng: random.Random) -> Episode:
    keys = rng.sample(["port", "host", "workers", "timeout", "level", "retries", "cache", "mode"], 5)
    values = {key: str(rng.randrange(1, 10_000)) for key in keys}
    target = rng.choice(keys)
    new = str(rng.randrange(10_000, 60_000))  # five digits: never the old value
    lines = ["# seeded settings", *(f"{key}={value}" for key, value in values.items())]
    path = "/work/app/settings.conf"
    expected = [f"{target}={new}" if line == f"{target}={values[target]}" else line for line in lines]
    return terminal_episode(
        f"set `{target}` to {new} in app/settings.conf (a line `{target}={new}` in place of the old one); "
        "leave every other line as it is.",
        files={path: "\n".join(lines) + "\n"},
        reads=(path,),
        check=text_is(expected, path),
        oracle=shell(f"sed -i 's/^{target}=.*/{target}={new}/' app/settings.conf"),
    )


TASKS = (
    Task("terminal-make-tree", "xterm", "make a named directory tree", make_tree),
    Task("terminal-count-lines", "xterm", "write a file's line count to a file", count_lines),
    Task("terminal-sort-unique", "xterm", "write a file's sorted distinct words to a file", sort_unique),
    Task("terminal-grep-log", "xterm", "copy a log's ERROR lines to a file", grep_log),
    Task("terminal-rename-ext", "xterm", "rename .txt files to .md in a folder", rename_ext),
    Task("terminal-archive", "xterm", "pack a folder into a .tar.gz archive", archive),
    Task("terminal-fix-modes", "xterm", "set scripts executable and a secret owner-only", fix_modes),
    Task("terminal-edit-config", "xterm", "change one setting in a config file", edit_config),
)
