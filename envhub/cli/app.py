"""The `envhub` typer app and what its commands share: consoles, error printing, option parsing.

Each group of the core's commands lives in its own module and registers itself on `app`; `envhub.cli`
imports them all. Commands from other distributions (`envhub swe`, `envhub train`) are plugins in the
`envhub.commands` entry-point group, found and imported by `envhub.cli.plugins` only when asked for.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from envhub.cli.output import console, errors, fail
from envhub.cli.plugins import PluginGroup
from envhub.registration import DuplicateEnvError, PluginImportError, UnknownEnvError

__all__ = ["USER_ERRORS", "app", "console", "errors", "fail", "parse_kwargs"]

app = typer.Typer(
    cls=PluginGroup,
    help="envhub: hermetic multi-turn environments for RL post-training of LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    suggest_commands=False,  # PluginGroup suggests, from the plugins' commands too
)

USER_ERRORS = (
    UnknownEnvError,
    PluginImportError,
    DuplicateEnvError,
    ValueError,
    TypeError,
    OSError,
    ImportError,
)


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
