"""Rewards are small methods marked `@envhub.reward`; an episode's reward is their weighted sum.

Each reward method asks for what it needs by parameter name (`answer`, `messages`), so authors write
`def exact(self, answer: str) -> float` and never unpack episode state by hand.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from envhub.author_code import call_author_code
from envhub.messages import Message

F = TypeVar("F", bound=Callable[..., Any])

_REWARD_MARK = "__envhub_reward__"
AVAILABLE = ("answer", "messages")


@overload
def reward(func: F, /) -> F: ...
@overload
def reward(*, weight: float = 1.0) -> Callable[[F], F]: ...
def reward(func: F | None = None, /, *, weight: float = 1.0) -> F | Callable[[F], F]:
    """Mark a method (sync or async) as a reward component; usable bare or as `@reward(weight=0.5)`."""

    def mark(f: F) -> F:
        unknown = [name for name in list(inspect.signature(f).parameters)[1:] if name not in AVAILABLE]
        if unknown:
            raise TypeError(
                f"reward {f.__name__!r} asks for {unknown}; reward methods may only take {list(AVAILABLE)}"
            )
        setattr(f, _REWARD_MARK, weight)
        return f

    return mark(func) if func is not None else mark


def reward_methods(obj: object) -> dict[str, tuple[Callable[..., Any], float]]:
    """The bound reward methods of an environment, by name, with their weights.

    An instance's `reward_weights` (component name -> weight) overrides the decorators' weights, so a
    constructor option can choose what is rewarded (`partial_credit=True`) without a second class.
    """
    found: dict[str, tuple[Callable[..., Any], float]] = {}
    names = dict.fromkeys(name for cls in reversed(type(obj).__mro__) for name in vars(cls))
    for name in names:
        attr = getattr(type(obj), name)  # the most derived definition: overriding unmarked disables it
        if hasattr(attr, _REWARD_MARK):
            found[name] = (getattr(obj, name), getattr(attr, _REWARD_MARK))
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
