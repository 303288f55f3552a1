"""Commands: list, info, play, rollout, new."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import envhub
from envhub.display import print_messages
from envhub.policies import SPECS, load_policy
from envhub.records import Episode
from envhub.registration import DuplicateEnvError, PluginImportError, UnknownEnvError, registry
from envhub.rollout import run_batch, run_episode, summarize, summary_table
from envhub.scaffold import create_plugin

app = typer.Typer(
    help="envhub: hermetic multi-turn environments for RL post-training of LLM agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True)

USER_ERRORS = (UnknownEnvError, PluginImportError, DuplicateEnvError, ValueError, TypeError)


def fail(exc: BaseException) -> typer.Exit:
    """Print a user-facing error without a Python traceback and return the exit to raise."""
    errors.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
    return typer.Exit(code=2)


def parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs from the command line; values are read as JSON when they parse as JSON."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE for --kwarg, got {pair!r} (e.g. --kwarg steps=4)")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


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
    return sorted(rows.values(), key=lambda row: row["id"])


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
    if entry and entry.tags:
        table.add_row("tags", ", ".join(entry.tags))
    console.print(table)
    asyncio.run(env.close())


@app.command()
def play(
    env_id: str,
    policy: Annotated[str, typer.Option(help=f"Who plays: {SPECS}.")] = "human",
    seed: Annotated[
        int | None, typer.Option(help="Episode seed; the same seed gives the same episode.")
    ] = None,
    kwarg: Annotated[list[str] | None, typer.Option(help="Env option KEY=VALUE (repeatable).")] = None,
) -> None:
    """Play one episode, printed turn by turn: yourself (the default) or with a scripted policy."""
    try:
        env = envhub.make(env_id, **parse_kwargs(kwarg or []))
        player = load_policy(policy)
    except USER_ERRORS as exc:
        raise fail(exc) from exc

    async def main() -> Episode:
        async with env:
            return await run_episode(env, player, seed=seed, on_messages=print_messages)

    episode = asyncio.run(main())
    if episode.error:
        errors.print(f"[red]episode ended early ({episode.error.kind}):[/] {episode.error.message}")
    ending = "terminated" if episode.terminated else "truncated" if episode.truncated else "stopped"
    components = ", ".join(f"{k}={v:g}" for k, v in episode.reward_components.items())
    console.print(
        f"[bold]{ending}[/] after {len(episode.turns)} turns · seed {episode.seed} · "
        f"return {episode.reward:g} ({components})"
    )


@app.command()
def rollout(
    env_id: str,
    policy: Annotated[str, typer.Option(help=f"Who plays: {SPECS}.")] = "oracle",
    episodes: Annotated[int, typer.Option(min=1, help="How many episodes.")] = 32,
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight at once.")] = 8,
    seed: Annotated[int, typer.Option(help="Episode i uses seed SEED + i.")] = 0,
    kwarg: Annotated[list[str] | None, typer.Option(help="Env option KEY=VALUE (repeatable).")] = None,
    out: Annotated[Path | None, typer.Option(help="Write every episode record to this JSONL file.")] = None,
) -> None:
    """Generate a batch of episodes and print a summary table."""
    try:
        env_kwargs = parse_kwargs(kwarg or [])
        player = load_policy(policy)
        envhub.make(env_id, **env_kwargs)  # fail fast, before the progress bar, on a bad id or option
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]:.3f} · errors {task.fields[errors]}"),
        TimeElapsedColumn(),
        console=console,
    )
    total = {"reward": 0.0, "done": 0, "errors": 0}

    with progress:
        task = progress.add_task(env_id, total=episodes, reward=0.0, errors=0)

        def advance(episode: Episode) -> None:
            total["done"] += 1
            total["reward"] += episode.reward
            total["errors"] += episode.error is not None
            progress.update(
                task, advance=1, reward=total["reward"] / total["done"], errors=int(total["errors"])
            )

        started = time.perf_counter()
        batch = asyncio.run(
            run_batch(
                env_id,
                player,
                episodes=episodes,
                concurrency=concurrency,
                seed=seed,
                env_kwargs=env_kwargs,
                on_episode=advance,
            )
        )
        wall = time.perf_counter() - started
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(episode.model_dump_json() + "\n" for episode in batch))
    console.print(summary_table(summarize(batch, wall_seconds=wall)))
    if out is not None:
        console.print(f"episodes written to {out}")


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
    lines = [
        f"Created {plugin.names.package} ({plugin.names.env_id}) in {plugin.root}:",
        *(f"  {path.relative_to(plugin.root)}" for path in plugin.files),
        "Next:",
        f"  pip install -e {plugin.root}",
        f"  pytest {plugin.root}",
    ]
    for line in lines:  # soft-wrapped, so that long paths stay copy-pasteable
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def main() -> None:
    app()
