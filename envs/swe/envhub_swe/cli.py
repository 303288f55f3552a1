"""`envhub swe validate` and `envhub swe prepare`: check the SWE datasets' grading, and set up real repos.

A command plugin (the `envhub.commands` entry point `swe` in pyproject.toml). The dataset, grading and
set-up modules are imported when a command runs, so `envhub --help` stays fast.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envhub.cli.app import console, fail

if TYPE_CHECKING:
    from envhub_swe.validate import Validation

app = typer.Typer(
    help="SWE-bench Lite and swe-mini: validate the grading, prepare local checkouts.",
    no_args_is_help=True,
    add_completion=False,  # completion belongs to the root `envhub` command
)


@app.command()
def validate(
    dataset: Annotated[str, typer.Option(help="swe-bench-lite or swe-mini")] = "swe-mini",
    instances: Annotated[
        list[str] | None, typer.Option("--instances", "-i", help="instance ids (default all)")
    ] = None,
    runtime: Annotated[str, typer.Option(help="local or docker")] = "local",
    split: Annotated[str, typer.Option(help="swe-bench-lite split: test or dev")] = "test",
    data: Annotated[Path | None, typer.Option(help="folder holding SWE-bench Lite's parquet files")] = None,
    workspaces: Annotated[Path | None, typer.Option(help="root of `envhub swe prepare` workspaces")] = None,
    concurrency: Annotated[int, typer.Option(min=1)] = 2,
    timeout: Annotated[
        float, typer.Option(min=1, help="seconds one grading command may run (the harness's 1800)")
    ] = 1800.0,
    keep_logs: Annotated[
        Path | None, typer.Option(help="folder for each run's whole log (ID.gold.log, ID.empty.log)")
    ] = None,
) -> None:
    """Grade each instance's gold patch (must resolve) and an empty patch (must not)."""
    from envhub_swe.data import DatasetNotFound, load, select
    from envhub_swe.prepare import Unsupported
    from envhub_swe.validate import validate as run_validation

    if runtime not in ("local", "docker"):
        console.print(f"[red]unknown runtime {runtime!r}[/red]: choose local or docker")
        raise typer.Exit(2)
    try:
        rows = select(load(dataset, split=split, path=data), instance=instances or None)
    except (DatasetNotFound, KeyError, ValueError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    started = time.monotonic()
    with Progress(
        TextColumn("[bold]validating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("validate", total=len(rows))

        def advance(_: Validation) -> None:
            progress.advance(task)

        try:
            results = asyncio.run(
                run_validation(
                    rows,
                    dataset=dataset,
                    runtime=runtime,  # type: ignore[arg-type]
                    workspaces=workspaces.resolve() if workspaces else None,
                    concurrency=concurrency,
                    timeout_s=timeout,
                    keep_logs=keep_logs,
                    on_done=advance,
                )
            )
        except Unsupported as exc:  # a missing image or workspace: say what to do, no traceback
            raise fail(exc) from exc
    table = Table(title=f"{dataset} · runtime {runtime}")
    for column in ("instance", "gold", "empty", "canary", "seconds", "note"):
        table.add_column(column)
    for r in results:
        table.add_row(
            r.instance_id,
            "[green]resolved[/green]" if r.gold_resolved else "[red]not resolved[/red]",
            "[red]resolved[/red]" if r.empty_resolved else "[green]not resolved[/green]",
            r.canary,
            f"{r.duration_s:.2f}",
            r.note,
        )
    console.print(table)
    good = sum(r.ok for r in results)
    console.print(f"{good}/{len(results)} valid in {time.monotonic() - started:.1f} s")
    if keep_logs is not None:
        console.print(f"whole logs in {keep_logs.resolve()}")
    if good != len(results):
        raise typer.Exit(1)


@app.command()
def prepare(
    instance: Annotated[str, typer.Option(help="the instance id")],
    repo: Annotated[Path, typer.Option(help="a local git clone of the instance's repository")],
    root: Annotated[Path, typer.Option(help="where workspaces go")] = Path("swe-workspaces"),
    dataset: Annotated[str, typer.Option(help="swe-bench-lite or swe-mini")] = "swe-bench-lite",
    split: Annotated[str, typer.Option()] = "test",
    data: Annotated[Path | None, typer.Option(help="folder holding SWE-bench Lite's parquet files")] = None,
    python: Annotated[
        str | None,
        typer.Option(
            help="interpreter for the venv: a path, or X.Y to look up (default: the spec's version)"
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=1, help="seconds one set-up step may run (the harness's 1800)")
    ] = 1800.0,
) -> None:
    """Make a checkout at base_commit and its environment (the official harness's spec) for one instance."""
    from envhub_swe.data import DatasetNotFound, load, select
    from envhub_swe.prepare import SetupFailed, Unsupported
    from envhub_swe.prepare import prepare as run_prepare

    try:
        (row,) = select(load(dataset, split=split, path=data), instance=instance)
        with console.status(f"preparing {instance} (the set-up log streams to ROOT/{instance}.prepare.log)"):
            dest = run_prepare(row, repo, root.resolve(), python=python, timeout_s=timeout)
    except Unsupported as exc:
        console.print(f"[yellow]cannot run locally[/yellow]: {exc}")
        raise typer.Exit(3) from exc
    except SetupFailed as exc:
        console.print(f"[red]the environment could not be built[/red] (nothing was left half-made): {exc}")
        raise typer.Exit(4) from exc
    except (DatasetNotFound, KeyError, ValueError, RuntimeError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    console.print(
        f"prepared {instance} in {dest} (repo at {row.base_commit[:12]}, venv, {dest / 'prepare.log'})"
    )
