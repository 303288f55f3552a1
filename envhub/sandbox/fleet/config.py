"""What a fleet is told: its providers in failover order, each one's quota and creation rate, and where
its leases live. `ENVHUB_FLEET` holds it: inline JSON, or the path of a TOML file.

    # fleet.toml                             ENVHUB_FLEET=fleet.toml
    when_full = "failover"                   # or "wait": a full provider is waited for, not skipped
    [[providers]]
    name = "local"
    max_concurrent = 8
    [[providers]]
    name = "docker"
    max_concurrent = 4
    rate_per_s = 2.0                         # creations per second, `burst` of them at once
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envhub.settings import settings, variable

ENV_VAR = variable("fleet")


class Provider(BaseModel):
    """One backend the fleet may open sandboxes on, and how hard it may be pushed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Literal["local", "docker", "e2b"]
    max_concurrent: int | None = Field(default=None, ge=1)
    """Sandboxes of this provider open at once through this fleet (None: no cap)."""
    rate_per_s: float | None = Field(default=None, gt=0)
    """Creations per second on average (None: no limit); provider APIs and engines refuse bursts."""
    burst: int = Field(default=1, ge=1)
    """Creations that may start at once after a quiet spell."""
    retry_after_s: float = Field(default=5.0, ge=0)
    """After a failed create the provider is passed over this long: a dead engine costs one failed
    attempt per interval, not one per sandbox."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Passed to the backend's `create` (e.g. e2b's request_timeout)."""


def _default_providers() -> tuple[Provider, ...]:
    return (Provider(name="local"), Provider(name="docker"), Provider(name="e2b"))


class FleetConfig(BaseModel):
    """The whole fleet: providers are tried in this order, the next one when one refuses or fails."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    providers: tuple[Provider, ...] = Field(default_factory=_default_providers, min_length=1)
    when_full: Literal["failover", "wait"] = "failover"
    """A provider at its quota is skipped for the next ("failover"; when all are full the open waits),
    or waited for ("wait": only refusals and failures move on to the next)."""
    quota_scope: Literal["process", "lease_dir"] = "process"
    """Whose sandboxes `max_concurrent` counts: this fleet's ("process"), or every fleet's that writes
    leases to the same directory ("lease_dir": all processes of a host with the default directory; on
    a shared filesystem whose flock works across hosts, a cluster)."""
    lease_dir: Path | None = None
    """Where lease files are written (None: $XDG_STATE_HOME/envhub/leases)."""
    lease_ttl_s: float = Field(default=30.0, gt=0)
    """How long this process's owner lease (envhub.sandbox.owner) lives without a heartbeat: a reaper in
    another PID namespace, boot or host reclaims the owner's sandboxes only once it is this old."""
    heartbeat_s: float = Field(default=5.0, gt=0)
    """How often the owner lease is renewed, from a thread of its own (one file per process)."""
    reap_on_start: bool = True
    """At its first open the fleet removes, in the background, the orphans of its providers (what
    `envhub fleet reap` removes): a crashed run's leftovers go when the next run starts."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise ValueError(f"a provider is listed twice in the fleet's order: {names}")
        if self.heartbeat_s >= self.lease_ttl_s:
            raise ValueError(
                f"heartbeat_s ({self.heartbeat_s}) must be shorter than lease_ttl_s ({self.lease_ttl_s}), "
                "or leases of live owners expire between heartbeats"
            )
        return self

    @classmethod
    def from_env(cls) -> FleetConfig:
        """The config in ENVHUB_FLEET (inline JSON, or a TOML file's path); the defaults when unset."""
        value = (settings().fleet or "").strip()
        if not value:
            return cls()
        if value.startswith("{"):
            return cls.model_validate(json.loads(value))
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError(f"{ENV_VAR}={value!r} is neither inline JSON nor a TOML file that exists")
        return cls.model_validate(tomllib.loads(path.read_text()))
