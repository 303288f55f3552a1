"""`envhub fleet ...`: what the sandbox fleet holds on this host, and removing what killed runs left.

`status` reads the fleet's config (ENVHUB_FLEET) and its lease files; `reap` removes the orphans the
reaper finds (envhub.sandbox.fleet.reaper says how they are found).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from envhub.cli.app import USER_ERRORS, app, console, fail

fleet = typer.Typer(help="The sandbox fleet: leases, quotas and orphaned sandboxes.", no_args_is_help=True)
app.add_typer(fleet, name="fleet")

LeaseDir = Annotated[
    Path | None,
    typer.Option(help="The lease directory (default: the config's, else $XDG_STATE_HOME/envhub/leases)."),
]


def _lease_dir(given: Path | None) -> Path:
    from envhub.sandbox.fleet import FleetConfig, default_lease_dir

    return given or FleetConfig.from_env().lease_dir or default_lease_dir()


@fleet.command()
def status(lease_dir: LeaseDir = None) -> None:
    """Per provider: its quota and rate, sandboxes in use (leases of live owners), leases of dead owners,
    orphans (those, and sandboxes of dead owners found by their owner marks)."""
    from envhub.sandbox.fleet import FleetConfig, LeaseBook
    from envhub.sandbox.fleet.reaper import find_orphans

    try:
        config = FleetConfig.from_env()
        book = LeaseBook(_lease_dir(lease_dir), config.lease_ttl_s)
        leases = book.leases()
        orphans = find_orphans(book)
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    table = Table(title=f"sandbox fleet · leases in {book.directory}", title_justify="left")
    for column in ("provider", "quota", "rate/s", "in use", "orphaned leases", "orphans"):
        table.add_column(column, justify="left" if column == "provider" else "right")
    for p in config.providers:
        mine = [lease for lease in leases if lease.provider == p.name]
        table.add_row(
            p.name,
            str(p.max_concurrent) if p.max_concurrent else "-",
            f"{p.rate_per_s:g} (burst {p.burst})" if p.rate_per_s else "-",
            str(sum(book.why_orphaned(lease) is None for lease in mine)),
            str(sum(book.why_orphaned(lease) is not None for lease in mine)),
            str(sum(o.provider == p.name for o in orphans)),
        )
    console.print(table)


@fleet.command()
def reap(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the orphans; remove nothing.")] = False,
    owner: Annotated[
        list[int] | None, typer.Option(help="Only orphans of this owner pid (repeatable).")
    ] = None,
    lease_dir: LeaseDir = None,
) -> None:
    """Remove what killed processes left: scratch areas, slot processes, containers, E2B sandboxes."""
    from envhub.sandbox.fleet import FleetConfig, LeaseBook
    from envhub.sandbox.fleet.reaper import find_orphans
    from envhub.sandbox.fleet.reaper import reap as remove

    try:
        config = FleetConfig.from_env()
        book = LeaseBook(_lease_dir(lease_dir), config.lease_ttl_s)
        orphans = find_orphans(book, owners=set(owner) if owner else None)
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    if not orphans:
        console.print("no orphaned sandboxes")
        return
    results = {o: None for o in orphans} if dry_run else remove(orphans, book)
    failed = 0
    for orphan, error in results.items():
        verb = "would remove" if dry_run else ("removed" if error is None else "could not remove")
        console.print(f"{verb} {orphan.provider} {orphan.kind} {orphan.ref} ({orphan.why})", highlight=False)
        if error is not None:
            failed += 1
            console.print(f"  {error}", highlight=False)
    if failed:
        raise typer.Exit(code=1)
