"""`envhub list` and `envhub info`: what environments exist, and what one of them is."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from importlib import metadata
from typing import Annotated, Any

import typer
from rich.table import Table

import envhub
from envhub.authoring.rewards import reward_methods
from envhub.cli.app import USER_ERRORS, app, console, fail
from envhub.registration import Registration, registry


def catalog() -> list[dict[str, Any]]:
    """Every environment the registry or the hub index knows, one row per id."""
    rows: dict[str, dict[str, Any]] = {}
    index_ids = registry.index.ids() if registry.index else {}
    for env_id, entry in index_ids.items():
        rows[env_id] = {
            "id": env_id,
            "package": entry.package,
            "installed": False,
            "description": entry.description,
            "tags": entry.tags,
            "default_sandbox": entry.default_sandbox,
        }
    conflicts = registry.conflicts()
    for env_id, registration in registry.registrations().items():
        row = rows.setdefault(
            env_id,
            {"id": env_id, "description": "", "tags": [], "default_sandbox": None},
        )
        row["package"] = registration.package or registration.origin
        row["installed"] = True
        if env_id in conflicts:
            row["conflict"] = [r.origin for r in conflicts[env_id]]
        elif not row["description"] or not row["tags"]:  # a plugin the hub's index does not know
            described = _described_by_plugin(registration)
            row["description"] = row["description"] or described["description"]
            row["tags"] = row["tags"] or described["tags"]
    return sorted(rows.values(), key=lambda row: row["id"])


def _described_by_plugin(registration: Registration) -> dict[str, Any]:
    """A plugin's own words: the first line of its class's docstring (else its package's summary), and
    its package's keywords as tags. A plugin that fails to import keeps the package's summary."""
    package: metadata.PackageMetadata | None = None
    if registration.package:
        with contextlib.suppress(metadata.PackageNotFoundError):
            package = metadata.metadata(registration.package)
    summary = (package["Summary"] if package and "Summary" in package else None) or ""
    keywords = (package["Keywords"] if package and "Keywords" in package else None) or ""
    doc = ""
    with contextlib.suppress(Exception):  # `envhub list` must list a broken plugin too
        doc = inspect.getdoc(registry._load(registration)) or ""
    return {
        "description": doc.strip().splitlines()[0] if doc.strip() else summary,
        "tags": [tag.strip() for tag in keywords.split(",") if tag.strip()],
    }


@app.command("list")
def list_envs(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List every environment: installed plugins and the hub's index."""
    rows = catalog()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table(title="envhub environments")
    table.add_column("id", no_wrap=True, style="bold")
    for column in ("installed", "package", "sandbox", "tags", "description"):
        table.add_column(column)
    for row in rows:
        installed = "yes" if row["installed"] else "[dim]no[/]"
        if row.get("conflict"):
            installed = "[red]conflict[/]"
        table.add_row(
            row["id"],
            installed,
            row["package"],
            row["default_sandbox"] or "",
            ", ".join(row["tags"]),
            row["description"],
        )
    console.print(table)


def _rewards(env: envhub.Env) -> str:
    """Each reward component with its weight and the first line of its docstring; the episode's reward
    is the weighted sum."""
    lines = []
    for name, (method, weight) in reward_methods(env).items():
        doc = (inspect.getdoc(method) or "").strip()
        lines.append(f"{name} × {weight:g}" + (f": {doc.splitlines()[0]}" if doc else ""))
    return "\n".join(lines) or "none declared with @envhub.reward (the env's step() sets the reward)"


@app.command()
def info(env_id: str) -> None:
    """Show an environment's spec, provenance, tools and constructor options."""
    try:
        env = envhub.make(env_id)
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    assert env.spec is not None
    spec = env.spec
    entry = registry.index.envs.get(envhub.parse_env_id(spec.id).family) if registry.index else None
    table = Table(title=spec.id, show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("class", f"{type(env).__module__}.{type(env).__qualname__}")
    table.add_row("description", (entry.description if entry else None) or inspect.getdoc(type(env)) or "")
    table.add_row("max turns", str(env.max_turns))
    for field, value in spec.provenance.model_dump().items():
        if value is not None:
            table.add_row(field.replace("_", " "), str(value))
    parameters = [
        str(p) for name, p in inspect.signature(type(env)).parameters.items() if name not in ("self",)
    ]
    table.add_row("options", ", ".join(parameters) or "none")
    table.add_row("tools", "\n".join(f"{t.name}: {t.description}" for t in env.tools) or "none")
    table.add_row("rewards", _rewards(env))
    if entry and entry.tags:
        table.add_row("tags", ", ".join(entry.tags))
    console.print(table)
    asyncio.run(env.close())
