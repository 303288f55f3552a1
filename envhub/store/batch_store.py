"""A batch directory on disk: sharded Parquet in episode order, a journal of finished episodes, a manifest.

Every finished episode is appended to the journal at once, so a `kill -9` loses nothing that finished.
Episodes move from the journal into Parquet shards, each written to a temporary file and renamed into
place, so a reader never sees half a shard. On resume, shard files and the journal are the truth (the
manifest is rebuilt from them), episodes already stored are skipped, and nothing is stored twice.

Shards keep the episodes in order: an episode goes into a new shard only once every episode before it
is stored (a straggler holds the later ones in the journal, up to `HELD_SHARDS` shards' worth), and an
episode that arrives after its neighbours were written (a straggler past that limit, a gap filled by a
resume, an error re-run) is merged into the shard whose range it falls in, which is rewritten whole.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from envhub.records import Episode, episode_id, episode_order
from envhub.store.batch_spec import BatchSpec
from envhub.store.manifest import (
    LEGACY_MANIFEST,
    MANIFEST,
    STATE_DIR,
    Manifest,
    load_manifest,
    save_manifest,
    write_atomically,
)
from envhub.store.schema import SCHEMA_VERSION, episodes_table
from envhub.store.shards import (
    JOURNAL,
    LEGACY_JOURNAL,
    describe,
    journaled,
    read_shard,
    shard_files,
    shard_version,
    write_shard,
)

HELD_SHARDS = 2
"""How many shards' worth of episodes may wait in the journal for a straggler before being written."""


class BatchExistsError(FileExistsError):
    """The output directory already holds a batch and `resume` was not asked for."""


class BatchMismatchError(ValueError):
    """Resuming with settings that differ from the stored batch would mix two batches."""


class BatchStore:
    """Writes one batch; use `open` to create a new batch directory or resume an existing one."""

    def __init__(self, root: Path, manifest: Manifest, *, shard_size: int) -> None:
        self.root = root
        self.manifest = manifest
        self.shard_size = shard_size
        self.done: set[str] = set()
        self._buffer: dict[str, Episode] = {}
        """Journaled episodes not yet in a shard."""
        self._journal: IO[str] | None = None
        self._lowest_missing = 0
        self._wall_before = manifest.wall_seconds
        self._opened = time.monotonic()
        self._closed: float | None = None

    @classmethod
    def open(
        cls, root: Path, spec: BatchSpec, *, episodes: int, resume: bool, shard_size: int = 256
    ) -> BatchStore:
        if shard_size < 1:
            raise ValueError(f"shard_size must be at least 1, got {shard_size}")
        manifest = load_manifest(root)
        if manifest is None:
            if root.exists() and any(root.iterdir()):
                raise BatchExistsError(
                    f"{root} is not empty and holds no envhub batch ({MANIFEST} is missing); "
                    "choose an empty or new --out directory"
                )
            root.mkdir(parents=True, exist_ok=True)
            manifest = Manifest(spec=spec, episodes_requested=episodes)
        elif not resume:
            raise BatchExistsError(
                f"{root} already holds a batch of {manifest.spec.env_id} ({manifest.episodes_done} of "
                f"{manifest.episodes_requested} episodes); pass --resume to complete it, "
                "or choose another --out"
            )
        elif manifest.spec != spec:
            stored, asked = manifest.spec.model_dump(), spec.model_dump()
            differences = ", ".join(
                f"{k}: stored {stored[k]!r}, asked {asked[k]!r}" for k in stored if stored[k] != asked[k]
            )
            raise BatchMismatchError(
                f"{root} holds a batch made with other settings ({differences}); resuming would mix two "
                "batches: repeat the original settings, or write to another --out"
            )
        manifest.episodes_requested = episodes
        manifest.schema_version = SCHEMA_VERSION
        store = cls(root, manifest, shard_size=shard_size)
        store._recover()
        return store

    def _recover(self) -> None:
        """Rebuild the state from the files: shards first, then journal episodes not yet in a shard.

        Shards of an older schema are rewritten in the current one, each atomically, and a folder of
        the old layout gets its manifest and journal moved into `.envhub/` (the old files go last, so a
        crash on the way leaves a folder this reads again).
        """
        (self.root / STATE_DIR).mkdir(exist_ok=True)
        for stray in [*self.root.glob(".*.tmp"), *(self.root / STATE_DIR).glob(".*.tmp")]:
            stray.unlink()
        self.manifest.shards = []
        for path in shard_files(self.root):
            table = read_shard(path, self.manifest.spec)
            if shard_version(path) != SCHEMA_VERSION:
                write_shard(path, table)
            self.done.update(str(i) for i in table.column("episode_id").to_pylist())
            self.manifest.shards.append(describe(path, table))
        pending = [e for e in journaled(self.root) if e.episode_id not in self.done]
        self._buffer = {e.episode_id: e for e in pending}
        self.done.update(self._buffer)
        save_manifest(self.root, self.manifest)
        # Recovered episodes go straight into shards, and only then is the journal rewritten, so a
        # crash during recovery loses nothing either.
        self._store(list(self._buffer.values()))
        if self._journal is None:
            self._rewrite_journal()  # drops torn lines, which a new line appended after would join
        for legacy in (LEGACY_JOURNAL, LEGACY_MANIFEST):
            (self.root / legacy).unlink(missing_ok=True)

    def remaining(self) -> list[int]:
        """Indices of the requested episodes not stored yet."""
        return [i for i in range(self.manifest.episodes_requested) if episode_id(i) not in self.done]

    def add(self, episode: Episode) -> None:
        """Store a finished episode: journaled at once, moved into a shard once its place is settled."""
        if episode.episode_id in self.done:
            raise ValueError(f"episode {episode.episode_id} is already stored in {self.root}")
        assert self._journal is not None, "the store is closed"
        self._journal.write(episode.model_dump_json() + "\n")
        self._journal.flush()
        self.done.add(episode.episode_id)
        self._buffer[episode.episode_id] = episode
        self._store(self._ready())

    def _ready(self) -> list[Episode]:
        """Whole shards of episodes whose predecessors are all stored, or the oldest shard's worth
        when a straggler has held back more than `HELD_SHARDS` shards."""
        while self._lowest_missing < self.manifest.episodes_requested and (
            episode_id(self._lowest_missing) in self.done
        ):
            self._lowest_missing += 1
        buffered = sorted(self._buffer.values(), key=lambda e: episode_order(e.episode_id))
        if self._lowest_missing < self.manifest.episodes_requested:
            bound = episode_order(episode_id(self._lowest_missing))
            settled = [e for e in buffered if episode_order(e.episode_id) < bound]
        else:
            settled = buffered
        whole = len(settled) // self.shard_size * self.shard_size
        if whole:
            return settled[:whole]
        if len(buffered) >= HELD_SHARDS * self.shard_size:
            return buffered[: self.shard_size]
        return []

    def _store(self, episodes: list[Episode]) -> None:
        """Move journaled episodes into shards, then rewrite the journal with the ones still waiting."""
        if not episodes:
            return
        self._place(episodes)
        for episode in episodes:
            del self._buffer[episode.episode_id]
        self._rewrite_journal()
        self._sync_manifest()

    def _place(self, episodes: Iterable[Episode]) -> None:
        """Episodes past every stored one fill new shards; the others join the shard whose range
        (or the gap after it) they fall in, so the shards' ranges stay disjoint and in file order."""
        shards = self.manifest.shards
        joining: dict[int, list[Episode]] = {}
        fresh: list[Episode] = []
        for episode in sorted(episodes, key=lambda e: episode_order(e.episode_id)):
            key = episode_order(episode.episode_id)
            if not shards or key > episode_order(shards[-1].last_episode_id):
                fresh.append(episode)
                continue
            owner = max(
                (i for i, s in enumerate(shards) if episode_order(s.first_episode_id) <= key), default=0
            )
            joining.setdefault(owner, []).append(episode)
        for owner, members in joining.items():
            path = self.root / shards[owner].file
            merged = pa.concat_tables([read_shard(path, self.manifest.spec), self._table(members)])
            shards[owner] = write_shard(path, merged)
        for start in range(0, len(fresh), self.shard_size):
            path = self.root / f"shard-{self._next_shard_number():05d}.parquet"
            shards.append(write_shard(path, self._table(fresh[start : start + self.shard_size])))

    def _table(self, episodes: list[Episode]) -> pa.Table:
        return episodes_table(episodes, self.manifest.spec)

    def _next_shard_number(self) -> int:
        return max((int(p.stem.split("-")[1]) for p in shard_files(self.root)), default=-1) + 1

    def _rewrite_journal(self) -> None:
        if self._journal is not None:
            self._journal.close()
        waiting = sorted(self._buffer.values(), key=lambda e: episode_order(e.episode_id))
        write_atomically(self.root / JOURNAL, "".join(e.model_dump_json() + "\n" for e in waiting).encode())
        self._journal = (self.root / JOURNAL).open("a")

    def forget(self, episode_ids: Iterable[str]) -> None:
        """Drop these stored episodes, so that `remaining()` lists them again: a fork group that a kill
        left part-stored is played again whole, and its old rows must not stay beside the new ones.

        Each shard holding one is rewritten atomically without it, and the journal after that, as in
        `forget_errors`: a kill part way leaves every episode stored once or missing.
        """
        dropping = set(episode_ids) & self.done
        if not dropping:
            return
        wanted = pa.array(sorted(dropping), type=pa.string())
        for number, info in reversed(list(enumerate(self.manifest.shards))):
            path = self.root / info.file
            table = read_shard(path, self.manifest.spec)
            hit = pc.is_in(table.column("episode_id").cast(pa.string()), value_set=wanted)
            if not pc.any(hit).as_py():
                continue
            kept = table.filter(pc.invert(hit))
            if kept.num_rows:
                self.manifest.shards[number] = write_shard(path, kept)
            else:
                path.unlink()
                del self.manifest.shards[number]
        for dropped in dropping & set(self._buffer):
            del self._buffer[dropped]
        self._rewrite_journal()
        self.done.difference_update(dropping)
        self._lowest_missing = 0
        self._sync_manifest()

    def forget_errors(self) -> list[int]:
        """Drop the stored episodes that ended in an infrastructure error, so that `remaining()` lists
        them again (for `--retry-errors`); returns their indices.

        Each shard holding one is rewritten atomically without it, and the journal after that. A kill
        part way leaves every episode either stored once or missing, so a plain resume reruns the
        missing ones and never runs one twice.
        """
        forgotten: list[str] = []
        for number, info in reversed(list(enumerate(self.manifest.shards))):
            path = self.root / info.file
            if pq.read_table(path, columns=["error_kind"]).column("error_kind").null_count == info.episodes:
                continue
            table = read_shard(path, self.manifest.spec)
            failed = pc.is_valid(table.column("error_kind"))
            forgotten += [str(i) for i in table.filter(failed).column("episode_id").to_pylist()]
            kept = table.filter(pc.invert(failed))
            if kept.num_rows:
                self.manifest.shards[number] = write_shard(path, kept)
            else:
                path.unlink()
                del self.manifest.shards[number]
        failed_buffered = [i for i, e in self._buffer.items() if e.error is not None]
        for failed_id in failed_buffered:
            del self._buffer[failed_id]
        self._rewrite_journal()
        forgotten += failed_buffered
        self.done.difference_update(forgotten)
        self._lowest_missing = 0
        self._sync_manifest()
        return sorted(int(i) for i in forgotten)

    def _sync_manifest(self) -> None:
        self.manifest.episodes_done = len(self.done)
        self.manifest.complete = all(
            episode_id(i) in self.done for i in range(self.manifest.episodes_requested)
        )
        self.manifest.wall_seconds = self._wall_before + ((self._closed or time.monotonic()) - self._opened)
        save_manifest(self.root, self.manifest)

    def close(self) -> None:
        """Move what is left into shards and record whether the batch is complete; closing twice is fine."""
        self._store(list(self._buffer.values()))
        if self._journal is not None:
            self._journal.close()
            self._journal = None
            self._closed = time.monotonic()
            with contextlib.suppress(FileNotFoundError):
                if (self.root / JOURNAL).stat().st_size == 0:
                    (self.root / JOURNAL).unlink()
        self._sync_manifest()

    def __enter__(self) -> BatchStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
