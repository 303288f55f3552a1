"""Where the `envhub` commands print: one console for results, one for errors, and how errors look."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.text import Text

console = Console()
errors = Console(stderr=True, soft_wrap=True)  # messages stay whole for copying and grepping


def fail(exc: BaseException) -> typer.Exit:
    """Print a user-facing error without a Python traceback and return the exit to raise."""
    errors.print(Text("error: ", style="bold red") + Text(str(exc)), highlight=False)
    return typer.Exit(code=2)
