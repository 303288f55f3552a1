"""The manifest of a batch directory: what was asked for, and which shard holds which episodes."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from envhub.store.schema import SCHEMA_VERSION

MANIFEST = "manifest.json"


class BatchSpec(BaseModel):
    """The settings that define a batch: resuming with different ones would mix two batches."""

    env_id: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    policy: str
    seed: int | None


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
    write_atomically(root / MANIFEST, manifest.model_dump_json(indent=2).encode())


def load_manifest(root: Path) -> Manifest | None:
    path = root / MANIFEST
    if not path.exists():
        return None
    try:
        return Manifest.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValueError) as exc:
        raise ValueError(f"{path} is not a readable envhub manifest: {exc}") from exc
