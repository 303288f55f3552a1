"""A cache of judge verdicts, so re-grading the same answers (a resumed batch, a re-run eval) costs nothing.

Entries live in an in-memory LRU and, when given a path, in a SQLite file that any number of judges,
threads or processes may share. Keys are digests, so the file holds no prompts or answers in the clear
beyond the verdicts themselves.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path


def cache_key(*parts: str | None) -> str:
    """A stable digest of the parts; `None` and `""` differ, so a missing reference is its own key."""
    return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()


class JudgeCache:
    """Verdicts by key: an in-memory LRU of `max_entries`, in front of an optional SQLite file at `path`.

    Thread-safe (one lock guards both layers); the async methods run SQLite in a worker thread so a slow
    disk never stalls the event loop.
    """

    def __init__(self, path: str | Path | None = None, *, max_entries: int = 10_000) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        self.path = Path(path).expanduser() if path is not None else None
        self.max_entries = max_entries
        self._memory: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
            with self._db:
                self._db.execute("PRAGMA journal_mode=WAL")  # readers in other processes never block
                self._db.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, value TEXT)")

    def get(self, key: str) -> str | None:
        """The stored value, or None; a disk hit is promoted into memory."""
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                return self._memory[key]
            if self._db is None:
                return None
            row = self._db.execute("SELECT value FROM verdicts WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            value = str(row[0])
            self._remember(key, value)
            return value

    def put(self, key: str, value: str) -> None:
        with self._lock:
            self._remember(key, value)
            if self._db is not None:
                with self._db:
                    self._db.execute("INSERT OR REPLACE INTO verdicts VALUES (?, ?)", (key, value))

    async def aget(self, key: str) -> str | None:
        if self._db is None:
            return self.get(key)
        return await asyncio.to_thread(self.get, key)

    async def aput(self, key: str, value: str) -> None:
        if self._db is None:
            self.put(key, value)
        else:
            await asyncio.to_thread(self.put, key, value)

    def __len__(self) -> int:
        with self._lock:
            if self._db is None:
                return len(self._memory)
            return int(self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    def clear(self) -> None:
        with self._lock:
            self._memory.clear()
            if self._db is not None:
                with self._db:
                    self._db.execute("DELETE FROM verdicts")

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _remember(self, key: str, value: str) -> None:
        if self.max_entries == 0:
            return
        self._memory[key] = value
        self._memory.move_to_end(key)
        while len(self._memory) > self.max_entries:
            self._memory.popitem(last=False)
