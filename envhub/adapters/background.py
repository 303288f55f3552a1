"""Making an env where it will run: on the background loop (envhub.sync_loop) that TRL's and SkyRL-Gym's
synchronous calls drive it on."""

from __future__ import annotations

from typing import Any

from envhub.core import Env
from envhub.registration import make
from envhub.sync_loop import run

__all__ = ["make_env", "run"]


def make_env(env_id: str, make_kwargs: dict[str, Any]) -> Env:
    """`envhub.make` on the background loop, where the env will run: some envs bind loop objects
    (locks, queues, clients) when they are built."""

    async def build() -> Env:
        return make(env_id, **make_kwargs)

    return run(build())
