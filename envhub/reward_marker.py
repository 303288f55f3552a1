"""The `@reward` marker: which methods of an object are reward components, and with what weight.

In the contract, not the authoring bases, because graders mark their methods too (the LLM judge's and
the reward model's rubrics) and stand below authoring; `envhub.authoring.rewards` scores what it marks,
and `envhub.reward` is this same function.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

F = TypeVar("F", bound=Callable[..., Any])

REWARD_MARK = "__envhub_reward__"
"""The attribute `@reward` sets on a method: its weight."""
AVAILABLE = ("answer", "messages")
"""What a reward method may ask for by parameter name."""


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
        setattr(f, REWARD_MARK, weight)
        return f

    return mark(func) if func is not None else mark
