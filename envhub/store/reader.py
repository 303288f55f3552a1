"""Reading a batch directory back: as Episodes, an Arrow table, pandas, or a Hugging Face dataset."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from envhub.records import Episode
from envhub.store.batch import JOURNAL, read_journal, shard_files
from envhub.store.manifest import MANIFEST
from envhub.store.schema import SCHEMA, episode_from_row, episodes_table

if TYPE_CHECKING:
    import pandas


def load_table(root: Path) -> pa.Table:
    """Every stored episode of a batch, including ones still in the journal after a crash."""
    if not (root / MANIFEST).exists():
        raise FileNotFoundError(
            f"{root} holds no envhub batch ({MANIFEST} is missing); give a --out directory"
        )
    tables = [pq.read_table(path, schema=SCHEMA) for path in shard_files(root)]
    stored = {str(i) for t in tables for i in t.column("episode_id").to_pylist()}
    pending = [e for e in read_journal(root / JOURNAL) if e.episode_id not in stored]
    if pending:
        tables.append(episodes_table(pending))
    table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    return table.sort_by("episode_id")


def read_episodes(root: Path) -> list[Episode]:
    return [episode_from_row(row) for row in load_table(root).to_pylist()]


def to_pandas(root: Path) -> pandas.DataFrame:
    return load_table(root).to_pandas()


def to_hf_dataset(root: Path) -> Any:
    """A `datasets.Dataset` of the batch (needs the `datasets` package)."""
    import datasets

    return datasets.Dataset(load_table(root))
