"""Shard files: reading one into the current schema, writing one sorted by episode, and its journal.

Rows are kept in episode order inside every shard, and shards hold disjoint, increasing ranges of
episode ids in the order of their names, so a reader that goes through the files in name order (as
pandas, pyarrow and Hugging Face `datasets` do) sees the episodes in order.
"""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import ValidationError

from envhub.records import Episode, episode_order
from envhub.store.batch_spec import BatchSpec
from envhub.store.manifest import STATE_DIR, ShardInfo, write_atomically
from envhub.store.schema import SCHEMA, SCHEMA_VERSION, episode_from_row, episodes_table

SHARD_GLOB = "shard-*.parquet"
JOURNAL = f"{STATE_DIR}/journal.jsonl"
"""Episodes finished but not yet in a shard, one JSON record a line, relative to the batch directory."""
LEGACY_JOURNAL = "journal.jsonl"


def shard_files(root: Path) -> list[Path]:
    return sorted(root.glob(SHARD_GLOB))


def shard_version(path: Path) -> int:
    metadata = pq.read_schema(path).metadata or {}
    return int(metadata.get(b"envhub.schema_version", b"1"))


def read_shard(path: Path, spec: BatchSpec | None) -> pa.Table:
    """A shard in the current schema; an older shard is converted through its records."""
    if shard_version(path) == SCHEMA_VERSION:
        return pq.read_table(path, schema=SCHEMA)
    return episodes_table([episode_from_row(row) for row in pq.read_table(path).to_pylist()], spec)


def sort_table(table: pa.Table) -> pa.Table:
    ids = [str(i) for i in table.column("episode_id").to_pylist()]
    order = sorted(range(len(ids)), key=lambda j: episode_order(ids[j]))
    return table.take(pa.array(order, type=pa.int64()))


def write_shard(path: Path, table: pa.Table) -> ShardInfo:
    """Write `table`, sorted by episode, atomically to `path`, and describe what it now holds."""
    table = sort_table(table)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    write_atomically(path, buffer.getvalue())
    return describe(path, table)


def describe(path: Path, table: pa.Table) -> ShardInfo:
    ids = sorted((str(i) for i in table.column("episode_id").to_pylist()), key=episode_order)
    return ShardInfo(file=path.name, episodes=len(ids), first_episode_id=ids[0], last_episode_id=ids[-1])


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


def journaled(root: Path) -> list[Episode]:
    """Every journaled episode, from both layouts' journals, each once."""
    seen: dict[str, Episode] = {}
    for name in (LEGACY_JOURNAL, JOURNAL):
        for episode in read_journal(root / name):
            seen.setdefault(episode.episode_id, episode)
    return list(seen.values())
