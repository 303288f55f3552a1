"""The `envhub` command line: one typer app, one module per group of commands."""

from envhub.cli import catalog, new, play, rollout
from envhub.cli.app import app

__all__ = ["app", "catalog", "new", "play", "rollout"]
