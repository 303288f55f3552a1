"""Run some modules with another forward for the length of a block, and leave no trace after it.

The step's speed-ups (`grad_accumulation.py`, `rms_norm.py`) swap a module's forward for one that
computes the same thing with a cheaper backward. They set it as an instance attribute, so the class and
every other instance are untouched, and delete it after the block, whatever the block raised. A module
that already has a forward of its own (a hook library, another swap) is not theirs to replace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch import nn


def replaceable(module: nn.Module) -> bool:
    """Whether `module` runs its class's forward (nothing has set one on the instance)."""
    return "forward" not in vars(module)


@contextlib.contextmanager
def replaced_forwards(forwards: Mapping[nn.Module, Callable[..., Any]]) -> Iterator[None]:
    """Within the block each module runs its forward from `forwards`."""
    for module, forward in forwards.items():
        module.forward = forward
    try:
        yield
    finally:
        for module in forwards:
            del module.forward
