"""`envhub bench ...`: the benchmarks that ship with envhub, from the installed command.

`envhub bench sandbox` is the sandbox benchmark's entry point (benchmarks/sandbox.py runs it); what it
measures, and how, is `envhub/sandbox/bench.py`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from envhub.cli.app import app, console

bench = typer.Typer(
    help="Measure envhub on this machine, side by side with a baseline.", no_args_is_help=True
)
app.add_typer(bench, name="bench")


@bench.command()
def sandbox(
    iterations: Annotated[int, typer.Option(min=1, help="Round trips per measurement.")] = 50,
    docker: Annotated[
        bool | None,
        typer.Option("--docker/--no-docker", help="Include Docker (default: when an engine answers)."),
    ] = None,
    image: Annotated[
        str | None, typer.Option(help="Docker image (default envhub/python:3-bookworm).")
    ] = None,
) -> None:
    """Sandbox cold start, exec and worker round trips: subprocess vs local (bubblewrap) vs Docker."""
    from envhub.sandbox.bench import run_benchmark

    console.print(run_benchmark(iterations, docker=docker, image=image))
