"""`envhub rollout` and `envhub show`: generate a batch of episodes to disk, and look at one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from envhub.cli.app import USER_ERRORS, app, console, errors, fail, parse_kwargs
from envhub.display import print_episode
from envhub.policies import SPECS, load_policy
from envhub.records import Episode
from envhub.registration import registry
from envhub.report import write_html_report
from envhub.rollout import BatchResult, RolloutLimits, run_batch, summarize, summary_table
from envhub.rollout.ray_backend import RayWorkerLost, ray_address, run_batch_ray
from envhub.store import BatchSpec, BatchStore, load_manifest, read_episodes


class _Tally:
    """Running figures for the progress bar."""

    def __init__(self) -> None:
        self.done = 0
        self.reward = 0.0
        self.failures = 0
        self.started = time.perf_counter()

    def add(self, episode: Episode) -> None:
        self.done += 1
        self.reward += episode.reward
        self.failures += episode.error is not None

    def show(self, progress: Progress, task: TaskID, *, advance: int = 0) -> None:
        elapsed = time.perf_counter() - self.started
        progress.update(
            task,
            advance=advance,
            reward=self.reward / self.done if self.done else 0.0,
            failures=self.failures,
            rate=self.done / elapsed if elapsed > 0 else 0.0,
        )


@app.command()
def rollout(
    env_id: str,
    policy: Annotated[str, typer.Option(help=f"Who plays: {SPECS}.")] = "oracle",
    episodes: Annotated[int, typer.Option(min=1, help="How many episodes.")] = 32,
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes in flight at once.")] = 8,
    seed: Annotated[int, typer.Option(help="Episode i uses seed SEED + i.")] = 0,
    kwarg: Annotated[list[str] | None, typer.Option(help="Env option KEY=VALUE (repeatable).")] = None,
    out: Annotated[
        Path | None, typer.Option(help="Batch directory: sharded Parquet, a journal and a manifest.")
    ] = None,
    resume: Annotated[bool, typer.Option(help="Complete the batch already in --out.")] = False,
    step_timeout: Annotated[
        float | None, typer.Option(min=0.001, help="Seconds per policy call or env step.")
    ] = None,
    episode_timeout: Annotated[
        float | None, typer.Option(min=0.001, help="Seconds per episode, then truncated.")
    ] = None,
    time_budget: Annotated[
        float | None, typer.Option(min=0.001, help="Seconds for the batch; stragglers are truncated.")
    ] = None,
    retries: Annotated[int, typer.Option(min=0, help="Retries of infrastructure failures.")] = 1,
    shard_size: Annotated[int, typer.Option(min=1, help="Episodes per Parquet shard.")] = 256,
    backend: Annotated[
        str,
        typer.Option(
            help="Where episodes run: local (asyncio, this process), ray (a local Ray instance), "
            "or the address of a Ray cluster: auto, ray://HOST:PORT."
        ),
    ] = "local",
) -> None:
    """Generate a batch of episodes, with a progress bar and a summary table; resumable with --out."""
    try:
        env_kwargs = parse_kwargs(kwarg or [])
        address = None if backend == "local" else ray_address(backend)
        player = load_policy(policy)
        resolved = registry.spec(env_id).id
        asyncio.run(registry.make(env_id, **env_kwargs).close())  # fail fast on a bad option
        limits = RolloutLimits(
            concurrency=concurrency,
            step_timeout=step_timeout,
            episode_timeout=episode_timeout,
            time_budget=time_budget,
            retries=retries,
        )
        spec = BatchSpec(env_id=resolved, env_kwargs=env_kwargs, policy=policy, seed=seed)
        store = None
        if out is not None:
            store = BatchStore.open(out, spec, episodes=episodes, resume=resume, shard_size=shard_size)
    except (*USER_ERRORS, ModuleNotFoundError) as exc:
        raise fail(exc) from exc
    indices = store.remaining() if store else list(range(episodes))
    tally = _Tally()
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward {task.fields[reward]:.3f} · failures {task.fields[failures]}"),
        TextColumn("· {task.fields[rate]:.1f} ep/s"),
        TimeElapsedColumn(),
        console=console,
    )

    task = progress.add_task(resolved, total=episodes, completed=episodes - len(indices))
    tally.show(progress, task)

    def record(episode: Episode) -> None:
        if store is not None:
            store.add(episode)
        tally.add(episode)
        tally.show(progress, task, advance=1)

    batch_run: Coroutine[Any, Any, BatchResult]
    if backend == "local":
        batch_run = run_batch(
            env_id,
            player,
            episodes=indices,
            seed=seed,
            limits=limits,
            env_kwargs=env_kwargs,
            on_episode=record,
        )
    else:
        batch_run = run_batch_ray(
            env_id,
            policy,
            episodes=indices,
            seed=seed,
            limits=limits,
            env_kwargs=env_kwargs,
            on_episode=record,
            address=address,
        )

    async def run_then_close_policy() -> BatchResult:
        try:
            return await batch_run
        finally:
            await player.close()  # the HTTP connection pool or local model lives in this loop

    try:
        with progress:
            result = asyncio.run(run_then_close_policy())
    except RayWorkerLost as exc:
        raise fail(exc) from exc
    except KeyboardInterrupt:
        if store is not None:
            store.close()
            errors.print(
                f"interrupted: {store.manifest.episodes_done} of {episodes} episodes are stored in {out}; "
                "run the same command with --resume to finish"
            )
        raise typer.Exit(code=130) from None
    finally:
        if store is not None:
            store.close()
    batch = read_episodes(out) if out is not None else result.episodes
    if batch:
        console.print(
            summary_table(summarize(batch, wall_seconds=result.wall_seconds if out is None else None))
        )
    if result.not_started:
        errors.print(
            f"the time budget ran out before {len(result.not_started)} episodes started; "
            "run the same command with --resume to finish them"
        )
    if out is not None:
        console.print(
            f"{len(batch)} episodes in {out} (this run: {len(result.episodes)}, {result.wall_seconds:.1f} s)"
        )


@app.command()
def show(
    directory: Annotated[Path, typer.Argument(help="A batch directory written by `envhub rollout --out`.")],
    episode: Annotated[str | None, typer.Option(help="Print this episode turn by turn.")] = None,
    html: Annotated[Path | None, typer.Option(help="Write a self-contained HTML report here.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Episodes listed in the table.")] = 20,
) -> None:
    """Summarize a stored batch, print any episode turn by turn, or write an HTML report."""
    try:
        manifest = load_manifest(directory)
        episodes = read_episodes(directory)
    except USER_ERRORS as exc:
        raise fail(exc) from exc
    if not episodes:
        raise fail(ValueError(f"{directory} holds no episodes yet"))
    if episode is not None:
        chosen = [e for e in episodes if e.episode_id == episode or e.episode_id == episode.zfill(6)]
        if not chosen:
            raise fail(
                ValueError(
                    f"no episode {episode!r} in {directory}; "
                    f"ids run from {episodes[0].episode_id} to {episodes[-1].episode_id}"
                )
            )
        print_episode(chosen[0], console)
        return
    console.print(summary_table(summarize(episodes)))
    if manifest is not None:
        state = "complete" if manifest.complete else "incomplete: run the rollout again with --resume"
        console.print(f"{manifest.episodes_done} of {manifest.episodes_requested} episodes ({state})")
    table = Table(title=f"episodes (first {min(limit, len(episodes))} of {len(episodes)})")
    for column in ("id", "seed", "reward", "turns", "ending", "error"):
        table.add_column(column)
    for e in episodes[:limit]:
        table.add_row(
            e.episode_id,
            str(e.seed),
            f"{e.reward:.3f}",
            str(len(e.turns)),
            e.ending,
            e.error.message if e.error else "",
        )
    console.print(table)
    if html is not None:
        path = write_html_report(episodes, html, title=f"{episodes[0].env_id} · {directory}")
        console.print(f"report written to {path}")
