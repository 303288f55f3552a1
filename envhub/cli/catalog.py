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
from rich.markup import escape
from rich.table import Table
from rich.text import Text

import envhub
from envhub.authoring.rewards import reward_methods
from envhub.checks import load_report
from envhub.cli.app import USER_ERRORS, app, console, fail
from envhub.lock.stamp import stamp
from envhub.registration import PluginImportError, Registration, registry
from envhub.wrappers import unwrap


def catalog() -> list[dict[str, Any]]:
    """Every environment the registry or the hub index knows, one row per id, each saying whether it can
    be played here (`available`) and, when not, why (`unavailable_reason`)."""
    rows: dict[str, dict[str, Any]] = {}
    index_ids = registry.index.ids() if registry.index else {}
    for env_id, entry in index_ids.items():
        rows[env_id] = {
            "id": env_id,
            "package": entry.package,
            "installed": False,
            "available": False,
            "unavailable_reason": f"not installed: pip install {entry.package}",
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
            reason: str | None = "provided by more than one plugin: " + ", ".join(row["conflict"])
        else:
            reason = unavailable_reason(env_id)
            if not row["description"] or not row["tags"]:  # a plugin the hub's index does not know
                described = _described_by_plugin(registration)
                row["description"] = row["description"] or described["description"]
                row["tags"] = row["tags"] or described["tags"]
        row["available"] = reason is None
        row["unavailable_reason"] = reason
    return sorted(rows.values(), key=lambda row: row["id"])


def unavailable_reason(env_id: str) -> str | None:
    """Why an installed id cannot be played here, or None: what its class declares, or its plugin's
    import error (`envhub info ID` prints the whole traceback)."""
    try:
        return registry.unavailable_reason(env_id)
    except PluginImportError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"its plugin fails to import: {first}"


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
    show_all: Annotated[
        bool, typer.Option("--all", help="Every playable id in one table per source, not the summary.")
    ] = False,
    unavailable: Annotated[
        bool,
        typer.Option(
            "--unavailable", help="Also list the ids that cannot be played here, each with the reason."
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every id as JSON, with `available` and the reason.")
    ] = False,
) -> None:
    """List the environments: by default a summary by source with counts; the ids with --all or
    --source. Ids that cannot be played here (missing data, not installed) are hidden unless asked."""
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
    if show_all or source is not None or unavailable:
        for package, group in groups.items():
            shown = [row for row in group if unavailable or row["available"]]
            if shown:
                console.print(_source_table(package, shown, hidden=len(group) - len(shown)))
    else:
        console.print(_summary_table(groups))
    installed = sum(row["installed"] for row in rows)
    playable = sum(row["available"] for row in rows)
    summary = (
        f"{_count(len(rows), 'environment')} from {_count(len(groups), 'source')}, {installed} installed, "
        f"{playable} playable here"
    )
    console.print(summary, highlight=False)
    hints = []
    if not (show_all or source is not None or unavailable):
        hints.append("--all lists every playable id, --source NAME one source's")
    if playable < len(rows) and not unavailable:
        hints.append(f"--unavailable adds the {len(rows) - playable} that cannot be played here, with why")
    if hints:
        console.print(f"envhub list {'; '.join(hints)}", highlight=False)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _summary_table(groups: dict[str, list[dict[str, Any]]]) -> Table:
    """One row per source: how many ids it has, and how many of them are installed and playable here
    (`--unavailable` lists the others with their reasons)."""
    table = Table(title="envhub environments by source", title_justify="left")
    table.add_column("source", style="bold", no_wrap=True)
    for column in ("ids", "installed", "playable"):
        table.add_column(column, justify="right")
    for package, group in groups.items():
        table.add_row(
            package,
            str(len(group)),
            str(sum(row["installed"] for row in group)),
            str(sum(row["available"] for row in group)),
        )
    return table


def _source_table(package: str, rows: list[dict[str, Any]], *, hidden: int = 0) -> Table:
    title = f"{package} · {_count(len(rows), 'id')}"
    if hidden:
        title += f" ({hidden} not playable here: --unavailable)"
    table = Table(title=title, title_justify="left")
    table.add_column("id", no_wrap=True, style="bold")
    for column in ("installed", "sandbox", "tags", "description"):
        table.add_column(column)
    for row in rows:
        installed = "yes" if row["installed"] else "[dim]no[/]"
        if row.get("conflict"):
            installed = "[red]conflict[/]"
        description = row["description"]
        if not row["available"]:
            description = f"[yellow]unavailable: {escape(row['unavailable_reason'])}[/] {escape(description)}"
        else:
            description = escape(description)
        table.add_row(
            row["id"],
            installed,
            row["default_sandbox"] or "",
            ", ".join(row["tags"]),
            description,
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
    """Show an environment's spec, provenance, tools and constructor options, and whether it can be
    played here (and if not, why)."""
    try:
        spec = stamp(registry.spec(env_id))  # with the lock hash `envhub lock` would pin
        reason = registry.unavailable_reason(env_id)
        env = envhub.make(env_id) if reason is None else None
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    env = None if env is None else unwrap(env)  # the env's own class is described, not make()'s wrappers
    entry = registry.index.envs.get(envhub.parse_env_id(spec.id).family) if registry.index else None
    table = Table(title=spec.id, show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    if env is not None:
        table.add_row("class", f"{type(env).__module__}.{type(env).__qualname__}")
    if entry is not None:
        description = entry.description
    elif env is not None:
        description = inspect.getdoc(type(env)) or ""
    else:  # not made: its class's own words, read as `envhub list` reads them
        description = _described_by_plugin(registry.resolve(spec.id))["description"]
    table.add_row("description", description)
    table.add_row("available", "yes" if reason is None else Text(f"no: {reason}", style="yellow"))
    if env is not None:
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
    if env is not None:
        parameters = [
            str(p) for name, p in inspect.signature(type(env)).parameters.items() if name not in ("self",)
        ]
        table.add_row("options", ", ".join(parameters) or "none")
        table.add_row("tools", "\n".join(f"{t.name}: {t.description}" for t in env.tools) or "none")
        table.add_row("rewards", _rewards(env))
    if entry and entry.tags:
        table.add_row("tags", ", ".join(entry.tags))
    console.print(table)
    if env is not None:
        asyncio.run(env.close())
