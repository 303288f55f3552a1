"""The `gym` namespace: `envhub.make("gym:<id>")` (or `gym/<id>`) for any gymnasium env a user has
installed that can be played as text. envhub's registry calls `factory_for` for ids no static entry
point names (the `envhub.namespaces` entry-point group)."""

from __future__ import annotations

from collections.abc import Callable

import gymnasium

from envhub.core import Env
from envhub_gym_text.env import gym_text_class


def factory_for(name: str) -> Callable[..., Env] | None:
    """The env class for gymnasium's id `name` ("FrozenLake-v1"), or None when gymnasium has no such id.

    An id gymnasium knows but that cannot be played as text (CartPole: no ANSI render, continuous
    observations) gets a factory all the same, which refuses with the reason when it is made.
    """
    if name not in gymnasium.registry:
        return None
    return gym_text_class(name)
