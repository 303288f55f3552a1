"""Which environment an episode ran in, and where it came from: `EnvSpec` and its `Provenance`.

Part of the contract (`envhub.core` exports both); a module of its own so that the registry and the
serve client can name an env's spec without the `Env` class and its machinery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class UnknownOptionError(TypeError):
    """An option the env does not declare: a keyword `make` was given, or a key of `reset`'s `options`.

    A TypeError, as Python's own for an unexpected keyword argument; the message names the valid ones.
    """


def refuse_unknown_options(
    env_id: str, given: Iterable[str], declared: Iterable[str] | None, *, at: str
) -> None:
    """Raise `UnknownOptionError` naming the declared options when `given` holds any other; nothing is
    checked where `declared` is None (the options are passed on to what checks them itself).

    `at` says where they were given: `make` (keyword options) or `reset` (its `options`)."""
    if declared is None:
        return
    valid = list(declared)
    unknown = [key for key in given if key not in valid]
    if not unknown:
        return
    names = ", ".join(repr(key) for key in unknown)
    listed = ", ".join(valid) if valid else "none"
    if at == "make":
        raise UnknownOptionError(
            f"{env_id} has no option {names}; its options: {listed} (see `envhub info {env_id}`)"
        )
    raise UnknownOptionError(f"{env_id} takes no reset option {names}; its reset options: {listed}")


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
    options: list[str] | None = None
    """The keyword options `make` takes for this env (its constructor's, `max_turns` aside, which
    `make` takes for every env); None where they are not known here (a constructor that takes any
    keyword and checks them itself). `make` refuses any other, naming these, for a URL id too."""
    reset_options: dict[str, str] | None = None
    """The keys `reset(options=...)` accepts, each with what it does (`Env.reset_options`); None where
    they are passed on to what checks them (an OpenEnv server), or where the class is not known."""

    def check_options(self, kwargs: Mapping[str, Any]) -> None:
        """Refuse keyword options this env does not take (`UnknownOptionError`, naming those it does)."""
        refuse_unknown_options(self.id, kwargs, self.options, at="make")
