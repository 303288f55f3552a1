"""A batch directory on disk: sharded Parquet, a journal of finished episodes, and a manifest.

Every finished episode is appended to `journal.jsonl` at once, so a `kill -9` loses nothing that
finished; every `shard_size` episodes the journal is compacted into a Parquet shard, written to a
temporary file and renamed into place. On resume, shard files and the journal are the truth (the
manifest is rebuilt from them), episodes already stored are skipped, and nothing is stored twice.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import IO

import pyarrow.parquet as pq
from pydantic import ValidationError

from envhub.records import Episode, episode_id
from envhub.store.manifest import (
    MANIFEST,
    BatchSpec,
    Manifest,
    ShardInfo,
    load_manifest,
    save_manifest,
    write_atomically,
)
from envhub.store.schema import episodes_table

JOURNAL = "journal.jsonl"
SHARD_GLOB = "shard-*.parquet"


class BatchExistsError(FileExistsError):
    """The output directory already holds a batch and `resume` was not asked for."""


class BatchMismatchError(ValueError):
    """Resuming with settings that differ from the stored batch would mix two batches."""


def read_journal(path: Path) -> list[Episode]:
    """Episodes in a journal; a torn last line (the process died mid-write) is ignored."""
    if not path.exists():
        return []
    episodes = []
    for line in path.read_text().splitlines():
        try:
            episodes.append(Episode.model_validate_json(line))
        except ValidationError:
            continue
    return episodes


def shard_files(root: Path) -> list[Path]:
    return sorted(root.glob(SHARD_GLOB))


def shard_ids(path: Path) -> list[str]:
    return [str(v) for v in pq.read_table(path, columns=["episode_id"]).column("episode_id").to_pylist()]


class BatchStore:
    """Writes one batch; use `open` to create a new batch directory or resume an existing one."""

    def __init__(self, root: Path, manifest: Manifest, *, shard_size: int) -> None:
        self.root = root
        self.manifest = manifest
        self.shard_size = shard_size
        self.done: set[str] = set()
        self._buffer: list[Episode] = []
        self._journal: IO[str] | None = None

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
        store = cls(root, manifest, shard_size=shard_size)
        store._recover()
        return store

    def _recover(self) -> None:
        """Rebuild the state from the files: shards first, then journal episodes not yet in a shard."""
        for stray in self.root.glob(".*.tmp"):
            stray.unlink()
        self.manifest.shards = []
        for path in shard_files(self.root):
            ids = shard_ids(path)
            self.done.update(ids)
            self.manifest.shards.append(
                ShardInfo(
                    file=path.name, episodes=len(ids), first_episode_id=min(ids), last_episode_id=max(ids)
                )
            )
        pending = {
            e.episode_id: e for e in read_journal(self.root / JOURNAL) if e.episode_id not in self.done
        }
        self._journal = (self.root / JOURNAL).open("a")
        # Recovered episodes go straight into a shard and only then is the journal emptied, so a crash
        # during recovery loses nothing either.
        self._buffer = list(pending.values())
        self.done.update(pending)
        if self._buffer:
            self._write_shard()
        else:
            self._journal.truncate(0)  # torn lines, or episodes already in a shard
        self._sync_manifest()

    def remaining(self) -> list[int]:
        """Indices of the requested episodes not stored yet."""
        return [i for i in range(self.manifest.episodes_requested) if episode_id(i) not in self.done]

    def add(self, episode: Episode) -> None:
        """Store a finished episode: journaled at once, compacted into a shard when enough accumulate."""
        if episode.episode_id in self.done:
            raise ValueError(f"episode {episode.episode_id} is already stored in {self.root}")
        assert self._journal is not None, "the store is closed"
        self._journal.write(episode.model_dump_json() + "\n")
        self._journal.flush()
        self.done.add(episode.episode_id)
        self._buffer.append(episode)
        if len(self._buffer) >= self.shard_size:
            self._write_shard()

    def _write_shard(self) -> None:
        if not self._buffer:
            return
        number = max((int(p.stem.split("-")[1]) for p in shard_files(self.root)), default=-1) + 1
        path = self.root / f"shard-{number:05d}.parquet"
        buffer = io.BytesIO()
        pq.write_table(episodes_table(self._buffer), buffer, compression="zstd")
        write_atomically(path, buffer.getvalue())
        ids = [e.episode_id for e in self._buffer]
        self.manifest.shards.append(
            ShardInfo(file=path.name, episodes=len(ids), first_episode_id=min(ids), last_episode_id=max(ids))
        )
        self._buffer = []
        assert self._journal is not None
        self._journal.seek(0)
        self._journal.truncate()  # everything journaled is now in a shard
        self._sync_manifest()

    def _sync_manifest(self) -> None:
        self.manifest.episodes_done = len(self.done)
        self.manifest.complete = all(
            episode_id(i) in self.done for i in range(self.manifest.episodes_requested)
        )
        save_manifest(self.root, self.manifest)

    def close(self) -> None:
        """Compact what is left into a shard and record whether the batch is complete."""
        self._write_shard()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
            with contextlib.suppress(FileNotFoundError):
                if (self.root / JOURNAL).stat().st_size == 0:
                    (self.root / JOURNAL).unlink()
        self._sync_manifest()

    def __enter__(self) -> BatchStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
