"""Episode storage: sharded Parquet with a versioned schema, a journal, a manifest, and resume."""

from envhub.records import episode_id
from envhub.store.batch import BatchExistsError, BatchMismatchError, BatchStore
from envhub.store.manifest import BatchSpec, Manifest, load_manifest
from envhub.store.reader import load_table, read_episodes, to_hf_dataset, to_pandas
from envhub.store.schema import SCHEMA, SCHEMA_VERSION, episode_from_row, episode_row

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "BatchExistsError",
    "BatchMismatchError",
    "BatchSpec",
    "BatchStore",
    "Manifest",
    "episode_from_row",
    "episode_id",
    "episode_row",
    "load_manifest",
    "load_table",
    "read_episodes",
    "to_hf_dataset",
    "to_pandas",
]
