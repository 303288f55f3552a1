"""The `envhub` command line: one typer app, one module per group of the core's commands.

Commands that need another distribution (`swe`, `train`, `report`) are plugins: see `envhub.cli.plugins`.
"""

from envhub.cli import bench, catalog, check, fleet, lock, new, play, replay, rollout, serve
from envhub.cli.app import app

__all__ = ["app", "bench", "catalog", "check", "fleet", "lock", "new", "play", "replay", "rollout", "serve"]
