"""Gymnasium's toy-text games, each under its own id (`gym/FrozenLake-v1`, ...): the entry points' targets.

`toy_text_ids()` is gymnasium's own list (every registered id whose entry point is in `toy_text`); the
package's entry points are generated from it by `tools/entry_points.py`, and a test checks they agree.
A module attribute per id (`FrozenLake_v1`) is built on first access (PEP 562). How each game reads as
text is `as_text`.
"""

from __future__ import annotations

from typing import Any

from envhub_gym_text.as_text import toy_text_ids as toy_text_ids  # importable from here too


def __getattr__(name: str) -> Any:
    """`FrozenLake_v1` → the env class for gymnasium's `FrozenLake-v1` (the entry points' targets)."""
    for gym_id in toy_text_ids() if not name.startswith("__") else []:
        if gym_id.replace("-", "_") == name:
            from envhub_gym_text.env import gym_text_class

            cls = gym_text_class(gym_id)
            globals()[name] = cls
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
