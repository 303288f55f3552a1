"""envhub's envs in gymnasium: `to_gymnasium(env)` adapts one env, and every envhub id is a gymnasium id.

`gymnasium.make("envhub/arithmetic-v0")` works once envhub is imported (`import envhub` imports this
package when gymnasium is installed, since gymnasium 1.x has no plugin hook). The adapter is `env`'s,
the id mapping and the registration `ids`'s.
"""

from __future__ import annotations

from envhub.integrations.gymnasium.env import GymnasiumEnv, UnicodeText, to_gymnasium
from envhub.integrations.gymnasium.ids import (
    envhub_id,
    gymnasium_id,
    make_gymnasium_env,
    register_gymnasium_envs,
)

__all__ = [
    "GymnasiumEnv",
    "UnicodeText",
    "envhub_id",
    "gymnasium_id",
    "make_gymnasium_env",
    "register_gymnasium_envs",
    "to_gymnasium",
]
