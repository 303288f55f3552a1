"""The manifest of a batch directory: what was asked for, and which shard holds which episodes.

The directory is a Parquet dataset that `pandas.read_parquet`, `pyarrow.dataset.dataset` and
`datasets.load_dataset("parquet", data_dir=...)` read as it is: the shards sit at the top, and the
store's own files live in the hidden `.envhub/` folder, since all three readers skip names that start
with a dot (pyarrow also skips `_`, Hugging Face `datasets` does not). Folders written before that layout
(`manifest.json` and `journal.jsonl` beside the shards) are still read, and moved on resume.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from envhub.store.batch_spec import BatchSpec
from envhub.store.schema import SCHEMA_VERSION

STATE_DIR = ".envhub"
MANIFEST = f"{STATE_DIR}/manifest.json"
"""Where the manifest lives, relative to the batch directory."""
LEGACY_MANIFEST = "manifest.json"
"""Where folders of schema version 1 keep it: beside the shards, where dataset readers trip on it."""


class ShardInfo(BaseModel):
    file: str
    episodes: int
    first_episode_id: str
    last_episode_id: str


class Manifest(BaseModel):
    schema_version: int = SCHEMA_VERSION
    spec: BatchSpec
    episodes_requested: int
    episodes_done: int = 0
    complete: bool = False
    shards: list[ShardInfo] = Field(default_factory=list)
    wall_seconds: float = 0.0
    """The batch's wall time: summed over its runs, each from opening the store to closing it."""
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


def write_atomically(path: Path, data: bytes) -> None:
    """Write to a temporary file beside `path`, then rename: readers never see a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save_manifest(root: Path, manifest: Manifest) -> None:
    manifest.updated_at = datetime.now(UTC)
    (root / STATE_DIR).mkdir(exist_ok=True)
    write_atomically(root / MANIFEST, manifest.model_dump_json(indent=2).encode())


def manifest_path(root: Path) -> Path | None:
    """The manifest file of a batch directory, in either layout, or None if it holds no batch."""
    for name in (MANIFEST, LEGACY_MANIFEST):
        if (root / name).is_file():
            return root / name
    return None


def load_manifest(root: Path) -> Manifest | None:
    path = manifest_path(root)
    if path is None:
        return None
    try:
        return Manifest.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValueError) as exc:
        raise ValueError(f"{path} is not a readable envhub manifest: {exc}") from exc
