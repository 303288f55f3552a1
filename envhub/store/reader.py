"""Reading a batch directory back: as Episodes, an Arrow table, pandas, or a Hugging Face dataset.

The folder is also a plain Parquet dataset (`pandas.read_parquet(dir)` works); these helpers add what
a plain reader cannot see: episodes still in the journal after a crash, and folders of the old layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from envhub.records import Episode
from envhub.store.manifest import MANIFEST, load_manifest
from envhub.store.schema import episode_from_row, episodes_table
from envhub.store.shards import journaled, read_shard, shard_files, sort_table

if TYPE_CHECKING:
    import pandas


def load_table(root: Path) -> pa.Table:
    """Every stored episode of a batch in episode order, including ones still in the journal."""
    manifest = load_manifest(root)
    if manifest is None:
        raise FileNotFoundError(
            f"{root} holds no envhub batch ({MANIFEST} is missing); give a --out directory"
        )
    tables = [read_shard(path, manifest.spec) for path in shard_files(root)]
    stored = {str(i) for t in tables for i in t.column("episode_id").to_pylist()}
    pending = [e for e in journaled(root) if e.episode_id not in stored]
    if pending:
        tables.append(episodes_table(pending, manifest.spec))
    return sort_table(pa.concat_tables(tables) if tables else episodes_table([]))


def read_episodes(root: Path) -> list[Episode]:
    """The batch's episode records, in episode order."""
    return [episode_from_row(row) for row in load_table(root).to_pylist()]


def to_pandas(root: Path) -> pandas.DataFrame:
    return load_table(root).to_pandas()


def to_hf_dataset(root: Path) -> Any:
    """A `datasets.Dataset` of the batch (needs the `datasets` package)."""
    import datasets

    return datasets.Dataset(load_table(root))
