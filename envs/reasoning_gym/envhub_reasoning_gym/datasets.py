"""The entry points' targets: `datasets.<name>` is the environment class of Reasoning Gym's dataset `<name>`.

The classes are built on first access (PEP 562), from the installed `reasoning-gym`'s own list, so the
entry points in pyproject.toml (written by tools/generate_entry_points.py) are the only list to keep.
"""

from __future__ import annotations

from envhub_reasoning_gym.env import ReasoningGymEnv, dataset_names, env_class


def __getattr__(name: str) -> type[ReasoningGymEnv]:
    if name.startswith("__") or name not in dataset_names():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r} (no such Reasoning Gym dataset)")
    return env_class(name)


def __dir__() -> list[str]:
    return sorted([*globals(), *dataset_names()])
