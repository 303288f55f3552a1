"""The `envhub` command line: one typer app, one module per group of commands."""

from envhub.cli import bench, catalog, new, play, rollout, swe, train
from envhub.cli.app import app

__all__ = ["app", "bench", "catalog", "new", "play", "rollout", "swe", "train"]
