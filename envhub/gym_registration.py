"""Every envhub id is also a gymnasium id: `gymnasium.make("envhub/arithmetic-v0")` builds the adapter.

gymnasium 1.x has no plugin hook, so importing envhub (which imports this module when gymnasium is
installed) registers the ids known at that moment.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from envhub.gym_adapter import GymnasiumEnv
from envhub.registration import make, registry


def make_gymnasium_env(
    env_id: str,
    *,
    max_length: int = 65_536,
    image_shape: tuple[int, int] | None = None,
    render_mode: str | None = None,
    **kwargs: Any,
) -> GymnasiumEnv:
    """What `gymnasium.make("envhub/<id>", **kwargs)` builds: the envhub env (given kwargs), adapted."""
    return GymnasiumEnv(
        make(env_id, **kwargs),
        max_length=max_length,
        image_shape=image_shape,
        render_mode=render_mode,
    )


setattr(make_gymnasium_env, "metadata", GymnasiumEnv.metadata)  # noqa: B010  (gymnasium.make reads it)


def gymnasium_id(env_id: str) -> str:
    """The gymnasium id of an envhub id: `envhub/<id>`, or the id itself when it has a namespace."""
    return env_id if "/" in env_id else f"envhub/{env_id}"


def register_gymnasium_envs() -> list[str]:
    """Make every envhub id known so far a gymnasium id too; returns the ids added.

    Registering imports no plugin: the env is made, through `envhub.make`, only when gymnasium makes it.
    """
    added = []
    for env_id in registry.registrations():
        name = gymnasium_id(env_id)
        if name not in gym.registry:
            gym.register(name, entry_point=f"{__name__}:make_gymnasium_env", kwargs={"env_id": env_id})
            added.append(name)
    return added


register_gymnasium_envs()
