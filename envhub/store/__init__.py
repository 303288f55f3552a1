"""Episode storage: a folder that is a Parquet dataset, with a journal, a manifest, and resume."""

from envhub.records import episode_id
from envhub.store.batch_spec import BatchSpec
from envhub.store.batch_store import BatchExistsError, BatchMismatchError, BatchStore
from envhub.store.export import export_trl
from envhub.store.manifest import MANIFEST, STATE_DIR, Manifest, load_manifest, manifest_path
from envhub.store.reader import load_table, read_episodes, to_hf_dataset, to_pandas
from envhub.store.schema import SCHEMA, SCHEMA_VERSION, episode_from_row, episode_row
from envhub.store.shards import JOURNAL

__all__ = [
    "JOURNAL",
    "MANIFEST",
    "SCHEMA",
    "SCHEMA_VERSION",
    "STATE_DIR",
    "BatchExistsError",
    "BatchMismatchError",
    "BatchSpec",
    "BatchStore",
    "Manifest",
    "episode_from_row",
    "episode_id",
    "episode_row",
    "export_trl",
    "load_manifest",
    "load_table",
    "manifest_path",
    "read_episodes",
    "to_hf_dataset",
    "to_pandas",
]
