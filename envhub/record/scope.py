"""Which tool call of a message the running code serves: the branch its calls to the world belong to.

Tool calls of one message run concurrently, so the calls each makes to its sandbox interleave differently
from run to run. Whoever runs them concurrently (`ToolEnv`) runs each inside `tool_call(index)`, and the
tape (`envhub.record.tape`) keeps each branch's calls in their own queue, in the program's order within
it. The env names its branches here without knowing whether anything records; the tape reads them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

_SCOPE: ContextVar[str] = ContextVar("envhub_tape_scope", default="env")


def current() -> str:
    """`env` outside tool calls, `tool N` inside the N-th tool call of the turn's message."""
    return _SCOPE.get()


@contextlib.contextmanager
def tool_call(index: int) -> Iterator[None]:
    """Run the block (and the tasks it starts) as the `index`-th tool call of the message."""
    token = _SCOPE.set(f"tool {index}")
    try:
        yield
    finally:
        _SCOPE.reset(token)
