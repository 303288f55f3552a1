"""`envhub play`: one episode, printed turn by turn, played by a person or a bundled policy."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

import envhub
from envhub.cli.app import USER_ERRORS, app, console, errors, fail, parse_kwargs
from envhub.display import ImageSaver, print_messages
from envhub.policies import SPECS, load_policy
from envhub.records import Episode
from envhub.report.html import write_html_report
from envhub.rollout import run_episode


@app.command()
def play(
    env_id: str,
    policy: Annotated[str, typer.Option(help=f"Who plays: {SPECS}.")] = "human",
    seed: Annotated[
        int | None, typer.Option(help="Episode seed; the same seed gives the same episode.")
    ] = None,
    kwarg: Annotated[list[str] | None, typer.Option(help="Env option KEY=VALUE (repeatable).")] = None,
    images: Annotated[
        Path | None,
        typer.Option(help="Save every image the agent sees (screenshots) to this folder, named in order."),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(help="Also write the episode as an HTML report (images inline, turn by turn)."),
    ] = None,
) -> None:
    """Play one episode, printed turn by turn: yourself (the default) or with a scripted policy."""
    try:
        env = envhub.make(env_id, **parse_kwargs(kwarg or []))
        player = load_policy(policy)
    except USER_ERRORS as exc:
        raise fail(exc) from exc

    saver = ImageSaver(images, console) if images is not None else None
    show = saver or print_messages

    async def main() -> Episode:
        async with env:
            try:
                return await run_episode(env, player, seed=seed, on_messages=show)
            finally:
                await player.close()

    episode = asyncio.run(main())
    if episode.error:
        errors.print(f"[red]episode ended early ({episode.error.kind}):[/] {episode.error.message}")
    ending = "terminated" if episode.terminated else "truncated" if episode.truncated else "stopped"
    components = ", ".join(f"{k}={v:g}" for k, v in episode.reward_components.items())
    console.print(
        f"[bold]{ending}[/] after {len(episode.turns)} turns · seed {episode.seed} · "
        f"return {episode.reward:g} ({components})"
    )
    if saver is not None:
        console.print(f"{saver.count} image(s) saved in {saver.folder}")
    if html is not None:
        written = write_html_report([episode], html, title=f"envhub play {env_id}")
        console.print(f"report: {written}")
