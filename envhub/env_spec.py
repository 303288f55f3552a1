"""Which environment an episode ran in, and where it came from: `EnvSpec` and its `Provenance`.

Part of the contract (`envhub.core` exports both); a module of its own so that the gymnasium adapter,
which `Env.to_gymnasium` builds, can name an env's spec without importing the core.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Provenance(BaseModel):
    """Where an environment came from, stored with every episode so results can be traced and compared."""

    model_config = ConfigDict(frozen=True)

    package: str | None = None
    package_version: str | None = None
    entry_point: str | None = None
    data_source: str | None = None
    default_sandbox: str | None = None
    lock_hash: str | None = None
    """The combined hash of what the env ran on (code, data, sandbox, grader, registry entry), as
    `envhub lock` writes it: equal hashes mean equal inputs (`envhub.lock`)."""


class EnvSpec(BaseModel):
    """The identity of a registered environment, as `envhub.make` resolved it."""

    model_config = ConfigDict(frozen=True)

    id: str
    namespace: str | None = None
    name: str
    version: int | None = None
    max_turns: int | None = None
    """The turn limit: on a made env, the one it runs with; from `envhub.spec(id)` (nothing built), the
    registration's, or None where the env's constructor sets it (it may follow its arguments)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """The keyword arguments the environment was built with."""
    provenance: Provenance = Field(default_factory=Provenance)
