"""`envhub list` and `envhub info`: what environments exist, where they come from, and what one of them is.

An id's source is the distribution that provides it (`envhub-games`, `envhub-reasoning-gym`); `info` reads
that distribution's version, licence and requirements from its installed metadata, and the id's last
arrival check from this machine (`envhub check` keeps it, see `envhub.checks`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import re
from collections import Counter
from importlib import metadata
from typing import Annotated, Any

import typer
from rich.table import Table

import envhub
from envhub.authoring.rewards import reward_methods
from envhub.checks import load_report
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


def _normalized(name: str) -> str:
    """A distribution name as pip compares them (PEP 503): `Envhub_Games` → `envhub-games`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _is_source(package: str, wanted: str) -> bool:
    """`--source` names a distribution, with or without its `envhub-` prefix: `reasoning-gym` finds
    `envhub-reasoning-gym`."""
    return _normalized(package) in (_normalized(wanted), f"envhub-{_normalized(wanted)}")


def by_source(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows grouped by the distribution that provides them, sources in name order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["package"], r["id"])):
        groups.setdefault(row["package"], []).append(row)
    return groups


@app.command("list")
def list_envs(
    source: Annotated[
        str | None,
        typer.Option(help="Only the ids one distribution provides, e.g. envhub-games or just games."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List every environment, grouped by source: installed plugins and the hub's index."""
    rows = catalog()
    if source is not None:
        chosen = [row for row in rows if _is_source(row["package"], source)]
        if not chosen:
            counts = Counter(row["package"] for row in rows)
            known = ", ".join(f"{name} ({n})" for name, n in sorted(counts.items()))
            raise fail(ValueError(f"no source named {source!r}; the sources are: {known}"))
        rows = chosen
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    groups = by_source(rows)
    for package, group in groups.items():
        console.print(_source_table(package, group))
    installed = sum(row["installed"] for row in rows)
    summary = (
        f"{_count(len(rows), 'environment')} from {_count(len(groups), 'source')}, {installed} installed"
    )
    console.print(summary, highlight=False)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _source_table(package: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=f"{package} · {_count(len(rows), 'id')}", title_justify="left")
    table.add_column("id", no_wrap=True, style="bold")
    for column in ("installed", "sandbox", "tags", "description"):
        table.add_column(column)
    for row in rows:
        installed = "yes" if row["installed"] else "[dim]no[/]"
        if row.get("conflict"):
            installed = "[red]conflict[/]"
        table.add_row(
            row["id"],
            installed,
            row["default_sandbox"] or "",
            ", ".join(row["tags"]),
            row["description"],
        )
    return table


def licence(package: str) -> str:
    """A distribution's licence from its metadata: the SPDX expression, else its licence classifiers,
    else a short License field; some distributions declare none."""
    try:
        meta = metadata.metadata(package)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"
    if "License-Expression" in meta:
        return meta["License-Expression"]
    classifiers = meta.get_all("Classifier") or []
    names = [c.rsplit(" :: ", 1)[-1] for c in classifiers if c.startswith("License ::")]
    if names:
        return ", ".join(names)
    text = meta["License"].strip() if "License" in meta else ""
    if text:  # some distributions put the whole licence text here: its first line names it
        first = text.splitlines()[0]
        return first if len(first) <= 60 and first == text else first[:57] + "..."
    return "not declared in the distribution's metadata"


def requirements(package: str) -> list[str]:
    """The distribution's own requirements (extras left out, envhub-core too), each with the version
    installed here and its licence: where a plugin's data and scoring come from."""
    try:
        declared = metadata.requires(package) or []
    except metadata.PackageNotFoundError:
        return []
    lines = []
    for requirement in declared:
        if "extra ==" in requirement.partition(";")[2]:
            continue
        match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
        if match is None or _normalized(match.group()) == "envhub-core":
            continue
        name = match.group()
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            lines.append(f"{name} (not installed)")
            continue
        lines.append(f"{name} {installed} ({licence(name)})")
    return lines


def arrival(env_id: str, package_version: str | None) -> str:
    """The last arrival check of `env_id` on this machine, in one line, or how to run it."""
    report = load_report(env_id)
    if report is None:
        return f"not run on this machine: envhub check {env_id}"
    line = f"{report.summary()} ({report.checked_at:%Y-%m-%d}, version {report.package_version})"
    if report.package_version != package_version:
        line += f"; version {package_version} is installed now: envhub check {env_id}"
    return line


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
    provenance = spec.provenance
    for field, value in provenance.model_dump().items():
        if value is not None:
            table.add_row(field.replace("_", " "), str(value))
    if provenance.package is not None:
        table.add_row("licence", licence(provenance.package))
        if depends := requirements(provenance.package):
            table.add_row("depends on", "\n".join(depends))
    table.add_row("arrival check", arrival(spec.id, provenance.package_version))
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
