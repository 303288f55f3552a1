"""`envhub swe validate` and `envhub swe prepare`: check the SWE datasets' grading, and set up real repos.

A command plugin (the `envhub.commands` entry point `swe` in pyproject.toml). The dataset, grading and
set-up modules are imported when a command runs, so `envhub --help` stays fast.
"""

from __future__ import annotations

import asyncio
import difflib
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envhub.cli.app import console

if TYPE_CHECKING:
    from envhub_swe.data import Instance
    from envhub_swe.validate import Validation, VerdictStore

app = typer.Typer(
    help="SWE-bench Lite and swe-mini: validate the grading, prepare local checkouts.",
    no_args_is_help=True,
    add_completion=False,  # completion belongs to the root `envhub` command
)


def _rows(dataset: str, ids: list[str] | None, *, split: str, data: Path | None) -> list[Instance]:
    """The rows asked for; ids the dataset lacks are an error that names the dataset read and the fix."""
    from envhub_swe.data import ENV_VAR, find_lite, load, select

    rows = load(dataset, split=split, path=data)
    missing = [i for i in ids or () if i not in {row.instance_id for row in rows}]
    if not missing:
        return select(rows, instance=ids or None)
    where = "the bundled set" if dataset == "swe-mini" else ", ".join(map(str, find_lite(split, data)))
    if dataset == "swe-bench-lite":
        where = f"its {split} split, {where}"
    lines = [f"unknown instance ids in {dataset} ({where}; {len(rows)} rows): {', '.join(missing)}"]
    elsewhere, lite_missing = _other_datasets(dataset, split=split, data=data)
    own = [row.instance_id for row in rows]
    for wanted in missing:
        if wanted in elsewhere:
            lines.append(f"{wanted} is in {elsewhere[wanted][0]}: pass {elsewhere[wanted][1]}")
        elif close := difflib.get_close_matches(wanted, own, n=1):
            lines.append(f"{wanted}: did you mean {close[0]}?")
        elif close := difflib.get_close_matches(wanted, list(elsewhere), n=1):
            other, option = elsewhere[close[0]]
            lines.append(f"{wanted}: did you mean {close[0]} (in {other}: pass {option})?")
    if lite_missing and len(lines) == 1:
        lines.append(
            "SWE-bench Lite ids need --dataset swe-bench-lite and its parquet files (not found here: "
            f"pass --data FOLDER or set ${ENV_VAR}=FOLDER)"
        )
    raise KeyError("\n".join(lines))


def _other_datasets(
    dataset: str, *, split: str, data: Path | None
) -> tuple[dict[str, tuple[str, str]], bool]:
    """Every id of the other datasets and splits this machine has, with the dataset's name and the
    options that choose it; and whether SWE-bench Lite could not be found."""
    from envhub_swe.data import SPLITS, DatasetNotFound, load

    others = [("swe-mini", "test")] if dataset != "swe-mini" else []
    others += [("swe-bench-lite", s) for s in SPLITS if (dataset, split) != ("swe-bench-lite", s)]
    found: dict[str, tuple[str, str]] = {}
    lite_missing = False
    for other, other_split in others:
        try:
            rows = load(other, split=other_split, path=data)
        except DatasetNotFound:
            lite_missing = True
            continue
        option = f"--dataset {other}" + (f" --split {other_split}" if other_split != "test" else "")
        name = other if other == "swe-mini" else f"{other}'s {other_split} split"
        found.update({row.instance_id: (name, option) for row in rows})
    return found, lite_missing


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
    concurrency: Annotated[int, typer.Option(min=1, help="instances graded at once")] = 2,
    together: Annotated[
        bool | None,
        typer.Option(
            "--together/--one-by-one",
            help="grade an instance's gold and empty at once (default: where there is a core per grade)",
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option(min=1, help="seconds one grading command may run (the harness's 1800)")
    ] = 1800.0,
    retries: Annotated[
        int, typer.Option(min=0, help="times a grade lost to the sandbox (infrastructure) is tried again")
    ] = 1,
    results: Annotated[
        Path | None,
        typer.Option(help="JSON-lines file: each grade's verdict is appended the moment it is reached"),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="reuse the verdicts already in --results (errors are graded again)")
    ] = False,
    keep_logs: Annotated[
        Path | None, typer.Option(help="folder for each run's whole log (ID.gold.log, ID.empty.log)")
    ] = None,
) -> None:
    """Grade each instance's gold patch (must resolve) and an empty patch (must not)."""
    from envhub_swe.validate import VerdictStore, default_together
    from envhub_swe.validate import validate as run_validation

    _check_validate_options(runtime, results, resume)
    rows = _validation_rows(dataset, instances, split=split, data=data)
    store = VerdictStore(results, resume=resume) if results is not None else None
    pair = default_together(concurrency, len(rows)) if together is None else together
    console.print(
        f"grading {len(rows)} instance(s) of {dataset}, gold and empty "
        + ("at once" if pair else "one after the other")
        + (f"; verdicts stored in {store.path} as they are reached" if store is not None else "")
    )
    started = time.monotonic()
    results_ = _with_progress(
        len(rows),
        lambda advance: run_validation(
            rows,
            dataset=dataset,
            runtime=runtime,  # type: ignore[arg-type]
            workspaces=workspaces.resolve() if workspaces else None,
            concurrency=concurrency,
            timeout_s=timeout,
            keep_logs=keep_logs,
            on_done=advance,
            together=pair,
            retries=retries,
            results=store,
        ),
    )
    good = _print_validation(results_, f"{dataset} · runtime {runtime}", started, store, keep_logs)
    if good != len(results_):
        raise typer.Exit(1)


def _with_progress(
    total: int, grading: Callable[[Callable[[Validation], None]], Coroutine[Any, Any, list[Validation]]]
) -> list[Validation]:
    """Run the grading under a progress bar that prints each instance's state as it is reached."""
    with Progress(
        TextColumn("[bold]validating"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("validate", total=total)

        def advance(result: Validation) -> None:
            state = "valid" if result.ok else "not graded" if result.errors else "invalid"
            progress.console.print(
                f"{result.instance_id}: {state}" + (f" ({result.note})" if result.note else "")
            )
            progress.advance(task)

        return asyncio.run(grading(advance))


def _check_validate_options(runtime: str, results: Path | None, resume: bool) -> None:
    """Options that cannot go together, refused before any grading starts."""
    if runtime not in ("local", "docker"):
        console.print(f"[red]unknown runtime {runtime!r}[/red]: choose local or docker")
        raise typer.Exit(2)
    if resume and results is None:
        console.print("[red]--resume reuses stored verdicts[/red]: give their file with --results")
        raise typer.Exit(2)
    if results is not None and not resume and results.exists() and results.stat().st_size:
        console.print(
            f"[red]{results} already holds verdicts[/red]: pass --resume to reuse them, "
            "or another --results file"
        )
        raise typer.Exit(2)


def _validation_rows(
    dataset: str, instances: list[str] | None, *, split: str, data: Path | None
) -> list[Instance]:
    """The instances to grade; a missing dataset or an unknown id is a readable exit 2."""
    from envhub_swe.data import DatasetNotFound

    try:
        return _rows(dataset, instances, split=split, data=data)
    except KeyError as exc:
        console.print(f"[red]{exc.args[0]}[/red]", soft_wrap=True)
        raise typer.Exit(2) from exc
    except (DatasetNotFound, ValueError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc


def _print_validation(
    results_: list[Validation], title: str, started: float, store: VerdictStore | None, keep_logs: Path | None
) -> int:
    """The verdicts' table, the count of valid instances (returned) and what to do about those not graded."""
    table = Table(title=title)
    for column in ("instance", "gold", "empty", "canary", "seconds", "note"):
        table.add_column(column)
    for r in results_:
        table.add_row(
            r.instance_id,
            _shown(r.gold_error, r.gold_resolved, good=True),
            _shown(r.empty_error, r.empty_resolved, good=False),
            r.canary,
            f"{r.wall_s:.2f}",
            r.note,
        )
    console.print(table)
    good = sum(r.ok for r in results_)
    console.print(f"{good}/{len(results_)} valid in {time.monotonic() - started:.1f} s")
    failed = [r for r in results_ if r.errors]
    if failed:
        kept = " (the other instances' verdicts stand)" if len(failed) < len(results_) else ""
        console.print(f"[yellow]{len(failed)} instance(s) not graded[/yellow]{kept}:")
        for message in dict.fromkeys(f"{r.instance_id}: {e}" for r in failed for e in r.errors):
            console.print(f"  {message}", soft_wrap=True)
        console.print(
            "to keep verdicts across runs, pass --results FILE (and --resume later to grade only the rest)"
            if store is None
            else f"to grade only those again: the same command with --resume (verdicts in {store.path})",
            soft_wrap=True,
        )
    if keep_logs is not None:
        console.print(f"whole logs in {keep_logs.resolve()}")
    return good


def _shown(error: str, resolved: bool, *, good: bool) -> str:
    """A verdict cell: resolved or not, green where it is what a valid instance needs; `error` unknown."""
    if error:
        return "[yellow]error[/yellow]"
    colour = "green" if resolved == good else "red"
    return f"[{colour}]{'resolved' if resolved else 'not resolved'}[/{colour}]"


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
    from envhub_swe.data import DatasetNotFound
    from envhub_swe.prepare import SetupFailed, Unsupported
    from envhub_swe.prepare import prepare as run_prepare

    try:
        (row,) = _rows(dataset, [instance], split=split, data=data)
        with console.status(f"preparing {instance} (the set-up log streams to ROOT/{instance}.prepare.log)"):
            dest = run_prepare(row, repo, root.resolve(), python=python, timeout_s=timeout)
    except Unsupported as exc:
        console.print(f"[yellow]cannot prepare[/yellow] {exc}", soft_wrap=True)
        raise typer.Exit(3) from exc
    except SetupFailed as exc:
        console.print(f"[red]the environment could not be built[/red] (nothing was left half-made): {exc}")
        raise typer.Exit(4) from exc
    except KeyError as exc:
        console.print(f"[red]{exc.args[0]}[/red]", soft_wrap=True)
        raise typer.Exit(2) from exc
    except (DatasetNotFound, ValueError, RuntimeError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    console.print(
        f"prepared {instance} in {dest} (repo at {row.base_commit[:12]}, venv, {dest / 'prepare.log'})"
    )
