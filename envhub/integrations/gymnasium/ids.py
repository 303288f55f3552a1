"""Every envhub id is also a gymnasium id: `gymnasium.make("envhub/arithmetic-v0")` builds the adapter.

gymnasium's id grammar is `[namespace/]name[-vN]`, one slash at most, so an envhub id that has a
namespace of its own (`reasoning-gym/chain_sum-v0`) cannot simply be prefixed with `envhub/`. The
mapping keeps gymnasium's three parts: the namespace is `envhub`, or `envhub-<namespace>` for a
namespaced id, and name and version are the envhub id's (`envhub-reasoning-gym/chain_sum-v0`). It is
reversible (`envhub_id`), and gymnasium's own version checks and `pprint_registry` grouping work on it.
The joint is a hyphen because gymnasium's namespaces allow only word characters, `-` and `:` (which
`gymnasium.make` reads as `module:id`); a namespace with a `.`, which envhub's grammar allows and
gymnasium's does not, has no gymnasium id, and `gymnasium_id` says so.

gymnasium 1.x has no plugin hook, so importing envhub (which imports this module when gymnasium is
installed) registers the ids known at that moment.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from envhub.ids import parse_env_id
from envhub.integrations.gymnasium.env import GymnasiumEnv, to_gymnasium
from envhub.registration import make, registry

NAMESPACE = "envhub"
"""The gymnasium namespace of an envhub id without a namespace; `envhub-<namespace>` for one with."""


def make_gymnasium_env(
    env_id: str,
    *,
    max_length: int = 65_536,
    image_shape: tuple[int, int] | None = None,
    render_mode: str | None = None,
    **kwargs: Any,
) -> GymnasiumEnv:
    """What `gymnasium.make("envhub/<id>", **kwargs)` builds: the envhub env (given kwargs), adapted."""
    return to_gymnasium(
        make(env_id, **kwargs),
        max_length=max_length,
        image_shape=image_shape,
        render_mode=render_mode,
    )


setattr(make_gymnasium_env, "metadata", GymnasiumEnv.metadata)  # noqa: B010  (gymnasium.make reads it)


def gymnasium_id(env_id: str) -> str:
    """The gymnasium id of an envhub id: `envhub/<id>`, or `envhub-<namespace>/<name>[-vN]`."""
    parsed = parse_env_id(env_id)
    if parsed.namespace is not None and "." in parsed.namespace:
        raise ValueError(
            f"{env_id!r} has no gymnasium id: gymnasium's namespaces cannot hold a '.'; "
            f"make it with envhub.integrations.gymnasium.to_gymnasium(envhub.make({env_id!r}))"
        )
    namespace = NAMESPACE if parsed.namespace is None else f"{NAMESPACE}-{parsed.namespace}"
    return f"{namespace}/{parsed._replace(namespace=None)!s}"


def envhub_id(gym_id: str) -> str:
    """The envhub id a gymnasium id of `gymnasium_id`'s form stands for (its inverse)."""
    namespace, name, version = gym.envs.registration.parse_env_id(gym_id)
    if namespace == NAMESPACE:
        prefix = ""
    elif namespace is not None and namespace.startswith(f"{NAMESPACE}-"):
        prefix = namespace.removeprefix(f"{NAMESPACE}-") + "/"
    else:
        raise ValueError(
            f"{gym_id!r} is not an envhub gymnasium id: expected 'envhub/<name>[-vN]' or "
            "'envhub-<namespace>/<name>[-vN]', e.g. 'envhub/arithmetic-v0' or "
            "'envhub-reasoning-gym/chain_sum-v0'"
        )
    return f"{prefix}{name}" if version is None else f"{prefix}{name}-v{version}"


def register_gymnasium_envs() -> list[str]:
    """Make every envhub id known so far a gymnasium id too; returns the ids added.

    Registering imports no plugin: the env is made, through `envhub.make`, only when gymnasium makes it.
    """
    added = []
    for env_id in registry.registrations():
        try:
            name = gymnasium_id(env_id)
        except ValueError:
            continue  # a namespace gymnasium cannot spell; `to_gymnasium(envhub.make(id))` still works
        if name not in gym.registry:
            gym.register(name, entry_point=f"{__name__}:make_gymnasium_env", kwargs={"env_id": env_id})
            added.append(name)
    return added


register_gymnasium_envs()
