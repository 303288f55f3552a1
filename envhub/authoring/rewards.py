"""Rewards are small methods marked `@envhub.reward`; an episode's reward is their weighted sum.

Each reward method asks for what it needs by parameter name (`answer`, `messages`), so authors write
`def exact(self, answer: str) -> float` and never unpack episode state by hand. The marker itself is
the contract's (`envhub.reward_marker`), so graders below this layer mark their methods with it too.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any

from envhub.author_code import call_author_code
from envhub.messages import Message
from envhub.reward_marker import AVAILABLE, REWARD_MARK, reward

__all__ = ["AVAILABLE", "reward", "reward_methods", "score"]


def reward_methods(obj: object) -> dict[str, tuple[Callable[..., Any], float]]:
    """The bound reward methods of an environment, by name, with their weights.

    An instance's `reward_weights` (component name -> weight) overrides the decorators' weights, so a
    constructor option can choose what is rewarded (`partial_credit=True`) without a second class.
    """
    found: dict[str, tuple[Callable[..., Any], float]] = {}
    names = dict.fromkeys(name for cls in reversed(type(obj).__mro__) for name in vars(cls))
    for name in names:
        attr = getattr(type(obj), name)  # the most derived definition: overriding unmarked disables it
        if hasattr(attr, REWARD_MARK):
            found[name] = (getattr(obj, name), getattr(attr, REWARD_MARK))
    overrides: Mapping[str, float] = getattr(obj, "reward_weights", None) or {}
    if unknown := sorted(set(overrides) - set(found)):
        raise ValueError(f"reward_weights names {unknown}, which are not rewards; rewards: {sorted(found)}")
    return {name: (method, overrides.get(name, weight)) for name, (method, weight) in found.items()}


async def score(obj: object, *, answer: str, messages: list[Message]) -> tuple[float, dict[str, float]]:
    """Run every reward method (sync ones off the event loop); return the weighted total and components."""
    available: dict[str, Any] = {"answer": answer, "messages": messages}
    components: dict[str, float] = {}
    total = 0.0
    for name, (method, weight) in reward_methods(obj).items():
        kwargs = {p: available[p] for p in inspect.signature(method).parameters}
        value = float(await call_author_code(method, **kwargs))
        if not math.isfinite(value):
            raise ValueError(f"reward {name!r} returned {value}; rewards must be finite numbers")
        components[name] = value
        total += weight * value
    return total, components
