"""Where the `envhub` commands print: one console for results, one for errors, and how errors look."""

from __future__ import annotations

import os
from typing import Any

import typer
import typer.rich_utils
from rich.console import Console, ConsoleDimensions, ConsoleRenderable, RichCast
from rich.measure import Measurement
from rich.text import Text

_UNBOUNDED = 100_000
"""The width a console without a terminal lays things out in before each is cut to its natural width."""
_FALLBACK = 80
"""The narrowest a console without a terminal prints (a rule, a panel of a short message): rich's own
default there, so only what is wider than 80 columns changes."""
_WIDEST = 1_000
"""The widest it prints what rich cannot measure; longer lines wrap."""


class WholeLinesConsole(Console):
    """A rich console that, writing to no terminal (a pipe, a file, a captured subprocess), prints each
    table, panel or line at its natural width instead of wrapping it at rich's default of 80 columns: a
    piped `envhub list` keeps one id per line for grep, and help keeps each option on one line.

    Hand-written because rich has no such mode: off a terminal it assumes 80 columns, or $COLUMNS.
    With $COLUMNS set, or on a terminal, it is rich's console unchanged.
    """

    def _whole_lines(self) -> bool:
        return self._width is None and not self.is_terminal and "COLUMNS" not in os.environ

    @property
    def size(self) -> ConsoleDimensions:
        dimensions = super().size
        return ConsoleDimensions(_UNBOUNDED, dimensions.height) if self._whole_lines() else dimensions

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]

    def print(self, *objects: Any, width: int | None = None, **kwargs: Any) -> None:
        if width is None and self._whole_lines() and not kwargs.get("soft_wrap"):
            width = max((self._natural_width(o) for o in objects), default=_FALLBACK)
        super().print(*objects, width=width, **kwargs)

    def _natural_width(self, renderable: Any) -> int:
        if isinstance(renderable, str):
            renderable = self.render_str(renderable)
        if not isinstance(renderable, ConsoleRenderable | RichCast):
            return _FALLBACK
        widest = Measurement.get(self, self.options, renderable).maximum
        return max(widest, _FALLBACK) if widest < _UNBOUNDED else self._narrowest_unwrapped(renderable)

    def _narrowest_unwrapped(self, renderable: ConsoleRenderable | RichCast) -> int:
        """For what rich cannot measure (a rule, typer's help rows, which are Columns): the narrowest
        width from 80 to `_WIDEST` at which it takes no more lines than at `_WIDEST`, found by bisection."""

        def lines(width: int) -> int:
            return len(self.render_lines(renderable, self.options.update_width(width), pad=False))

        low, high = _FALLBACK, _WIDEST
        fewest = lines(high)
        if lines(low) <= fewest:
            return low
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (low, middle) if lines(middle) <= fewest else (middle, high)
        return high


def _help_console(stderr: bool = False) -> Console:
    """Typer's help console, printing whole lines off a terminal as ours does."""
    helper = _typer_console(stderr)
    helper.__class__ = WholeLinesConsole  # same state; only how wide it prints changes
    return helper


_typer_console = typer.rich_utils._get_rich_console
typer.rich_utils._get_rich_console = _help_console  # typer builds its help and error consoles here

console = WholeLinesConsole()
errors = WholeLinesConsole(stderr=True, soft_wrap=True)  # messages stay whole for copying and grepping


def fail(exc: BaseException) -> typer.Exit:
    """Print a user-facing error without a Python traceback and return the exit to raise."""
    errors.print(Text("error: ", style="bold red") + Text(str(exc)), highlight=False)
    return typer.Exit(code=2)
