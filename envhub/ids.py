"""Environment ids: `[namespace/]name[-vN]`, parsed by one regular expression as in gymnasium."""

from __future__ import annotations

import re
from typing import NamedTuple

ENV_ID_RE = re.compile(r"^(?:(?P<namespace>[\w.-]+)/)?(?P<name>\w[\w.-]*?)(?:-v(?P<version>\d+))?$")


class InvalidEnvId(ValueError):
    """An id that does not have the `[namespace/]name[-vN]` shape."""


class EnvId(NamedTuple):
    namespace: str | None
    name: str
    version: int | None

    @property
    def family(self) -> str:
        """The id without its version: all versions of one environment share it."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def __str__(self) -> str:
        return self.family if self.version is None else f"{self.family}-v{self.version}"


def parse_env_id(env_id: str) -> EnvId:
    match = ENV_ID_RE.fullmatch(env_id)
    if match is None:
        raise InvalidEnvId(
            f"malformed environment id {env_id!r}: expected '[namespace/]name[-vN]', "
            "for example 'arithmetic-v0' or 'acme/web-shop-v2'"
        )
    version = match.group("version")
    return EnvId(match.group("namespace"), match.group("name"), int(version) if version else None)
