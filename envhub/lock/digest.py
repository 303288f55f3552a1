"""Content hashes that mean the same thing on every machine: file bytes and sorted names, never mtimes.

A component of a lock is a set of named parts (a file's path relative to its package root, or a
setting such as the docker image id), each with a value; its hash is the hash of those sorted pairs,
so the lockfile can keep the parts and a check can name the one that changed.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
"""Folders that are caches of the code, not the code: what Python or a tool writes next to it."""
SKIPPED_SUFFIXES = (".pyc", ".pyo")


def sha256_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """A file's content hash, read in chunks so a large data file costs no memory.

    Remembered in this process by the file's identity, size and change time, as git's index does: a
    package shared by hundreds of ids (an outside collection) is read once, and an edit is still seen.
    """
    info = path.stat()
    key = (str(path), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    known = _hashed.get(key)
    if known is None:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        known = _hashed[key] = "sha256:" + digest.hexdigest()
    return known


_hashed: dict[tuple[str, int, int, int, int], str] = {}


def parts_hash(parts: Mapping[str, str]) -> str:
    """The hash of named values, independent of the order they were found in."""
    text = "".join(f"{name}\0{value}\n" for name, value in sorted(parts.items()))
    return sha256_bytes(text.encode("utf-8"))


def tree_files(root: Path) -> Iterable[Path]:
    """The regular files under `root`, in a sorted walk, without caches; symlinked files are followed
    (their content is what Python reads), symlinked folders are not (they could loop)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(folder, name)
            if not name.endswith(SKIPPED_SUFFIXES) and path.is_file():
                yield path


def file_parts(paths: Iterable[Path], base: Path, prefix: str = "") -> dict[str, str]:
    """`{relative posix path: content hash}` for `paths`, named relative to `base` (after `prefix`)."""
    return {prefix + path.relative_to(base).as_posix(): sha256_file(path) for path in paths}
