"""`envhub play`: one episode, printed turn by turn, played by a person or a bundled policy."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

import envhub
from envhub.cli.app import USER_ERRORS, app, console, errors, fail, parse_kwargs
from envhub.display import print_messages
from envhub.policies import SPECS, load_policy
from envhub.records import Episode
from envhub.rollout import run_episode


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
            try:
                return await run_episode(env, player, seed=seed, on_messages=print_messages)
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
