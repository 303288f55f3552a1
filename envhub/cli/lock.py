"""`envhub lock`: pin what env ids run on, in a lockfile that `envhub rollout --locked` checks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envhub.cli.app import USER_ERRORS, app, errors, fail, parse_kwargs
from envhub.lock import COMPONENTS, LockEntry, LockError
from envhub.lock.lockfile import Locked, current, dumps
from envhub.rollout.kwargs import check_env_kwargs
from envhub.store.manifest import write_atomically


@app.command()
def lock(
    env_ids: Annotated[
        list[str], typer.Argument(metavar="ID...", help="The env ids to pin, e.g. arithmetic-v0 tool-use-v0.")
    ],
    kwarg: Annotated[
        list[str] | None,
        typer.Option(
            help="Env option KEY=VALUE (repeatable), as given to rollout: backend and image "
            "choose the sandbox that is pinned."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the lockfile here instead of to stdout.")] = None,
) -> None:
    """Pin each id's code and data (its whole plugin distribution), sandbox image, envhub itself (every
    file of envhub-core: reward aggregation, graders, runner) and registry entry, file by file.

    The lockfile goes to stdout (or --out); the progress bar and the summary table to stderr, so
    `envhub lock ID... > envhub.lock` works. `envhub rollout ID --locked envhub.lock` then refuses to
    run when anything pinned has changed.
    """
    try:
        options = parse_kwargs(kwarg or [])
        entries = _hash_all(env_ids, options)
    except (*USER_ERRORS, LockError) as exc:
        raise fail(exc) from exc
    errors.print(_summary(entries))
    text = dumps(Locked(entry, options) for entry in entries)
    if out is None:
        sys.stdout.write(text)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, text.encode("utf-8"))  # a half-written lock would refuse every run
    errors.print(f"lockfile written to {out}")


def _hash_all(env_ids: list[str], options: dict[str, object]) -> list[LockEntry]:
    """Each id's entry, with a progress bar on stderr; the first id that cannot be locked stops it."""
    progress = Progress(
        TextColumn("[bold]hashing"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=errors,
        transient=True,
    )
    entries: dict[str, LockEntry] = {}
    with progress:
        task = progress.add_task("", total=len(env_ids))
        for env_id in env_ids:
            progress.update(task, description=env_id)
            check_env_kwargs(env_id, options)  # a mistyped option would pin the wrong sandbox
            try:
                entry = current(env_id, options, reuse=True)  # one reading of each package
            except LockError as exc:
                raise LockError(f"cannot lock {env_id}: {exc}") from exc
            entries[entry.env_id] = entry  # an unversioned id and its version are one entry
            progress.advance(task)
    return list(entries.values())


def _summary(entries: list[LockEntry]) -> Table:
    """One row per id: its combined hash and what each file component covers (the hashes are in the file)."""
    table = Table(title="locked")
    table.add_column("id", no_wrap=True)
    table.add_column("hash", no_wrap=True)
    for name in COMPONENTS[:-1]:  # the registry entry is one row of registry.yaml: nothing to count
        table.add_column(name)
    for entry in sorted(entries, key=lambda e: e.env_id):
        table.add_row(entry.env_id, _short(entry.hash), *(_describe(entry, n) for n in COMPONENTS[:-1]))
    return table


def _describe(entry: LockEntry, name: str) -> str:
    """What a component covers: how many files, or which sandbox (with the image's short id)."""
    parts = entry.components[name].parts
    if name != "sandbox":
        return f"{len(parts)} file{'s' if len(parts) != 1 else ''}"
    if parts["kind"] == "docker":
        return f"docker {parts['image']} {_short(parts['image id'])}"
    if parts["kind"] == "local":
        return f"local {Path(parts['python']).name}"
    return parts["kind"]


def _short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]
