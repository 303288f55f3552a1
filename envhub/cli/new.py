"""`envhub new`: a plugin package to start a new environment from."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envhub.cli.app import app, console, fail
from envhub.scaffold import core_source, create_plugin, install_line


@app.command()
def new(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The environment's name: lowercase words joined by hyphens.")
    ],
    dest: Annotated[Path, typer.Option(help="Folder to create the package envhub-NAME in.")] = Path("."),
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite the generated files of an existing package.")
    ] = False,
) -> None:
    """Create a plugin package for a new environment: a working example, its entry point and its test."""
    try:
        plugin = create_plugin(name, dest, force=force)
    except (ValueError, OSError) as exc:
        raise fail(exc) from exc
    core = core_source()
    where = (
        f"envhub-core comes from {core.removeprefix('-e ')}, where this one was installed from: the "
        "package index has no envhub-core"
        if core
        else "envhub-core comes from the package index"
    )
    lines = [
        f"Created {plugin.names.package} ({plugin.names.env_id}) in {plugin.root}:",
        *(f"  {path.relative_to(plugin.root)}" for path in plugin.files),
        f"Next, in any venv, a fresh one too ({where}; [test] brings pytest):",
        f"  {install_line(plugin.root)}",
        f"  pytest {plugin.root}",
    ]
    for line in lines:  # soft-wrapped, so that long paths stay copy-pasteable
        console.print(line, highlight=False, markup=False, soft_wrap=True)
