"""What a batch was asked for: stored in its manifest, and written into every row of its shards.

Its own module because the manifest (which records it) and the schema (which derives row columns from
it) both need it, and the manifest also needs the schema's version.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class BatchSpec(BaseModel):
    """The settings that define a batch: resuming with different ones would mix two batches."""

    env_id: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    policy: str
    seed: int | None
