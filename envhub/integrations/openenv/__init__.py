"""OpenEnv both ways: `envhub.make("openenv:URL")` plays an OpenEnv server's env (`env`), and `envhub
serve` speaks OpenEnv's protocol (`routes`, serve's layer); `wire` is that protocol's messages."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envhub.integrations.openenv.env import OpenEnvEnv


def make_env(target: str, *, max_turns: int | None = None, timeout: float = 300.0) -> OpenEnvEnv:
    """The `openenv:URL` factory of the format hook: `URL` is the server's base (what an OpenEnv client
    is given); `timeout` (seconds to wait for each reply) is its one option, named here so that `make`
    refuses any other by name."""
    from envhub.integrations.openenv.env import OpenEnvEnv  # websockets and httpx: only for openenv: ids

    return OpenEnvEnv(target, max_turns=max_turns, timeout=timeout)
