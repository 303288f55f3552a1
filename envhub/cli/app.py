"""The `envhub` typer app and what its commands share: consoles, error printing, option parsing.

Each group of commands lives in its own module and registers itself on `app`; `envhub.cli` imports
them all.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from envhub.registration import DuplicateEnvError, PluginImportError, UnknownEnvError

app = typer.Typer(
    help="envhub: hermetic multi-turn environments for RL post-training of LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True, soft_wrap=True)  # messages stay whole for copying and grepping

USER_ERRORS = (
    UnknownEnvError,
    PluginImportError,
    DuplicateEnvError,
    ValueError,
    TypeError,
    OSError,
    ImportError,
)


def fail(exc: BaseException) -> typer.Exit:
    """Print a user-facing error without a Python traceback and return the exit to raise."""
    errors.print(Text("error: ", style="bold red") + Text(str(exc)), highlight=False)
    return typer.Exit(code=2)


def parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs from the command line; values are read as JSON when they parse as JSON."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE for --kwarg, got {pair!r} (e.g. --kwarg steps=4)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out
