"""Play every available textarena game; print the random baseline, and the oracle where one exists.

    .venv/bin/python envs/textarena/benchmarks/sweep.py [--episodes 3] [--opponent random] [GAME_NAME ...]

For each game: the mean reward of envhub's random policy (`RandomPolicy`, seeded) over the episodes,
how many episodes the game itself finished, the mean number of agent turns, any episode errors, and
the oracle's mean reward for the games with a scripted solution. The catalogue figures in
/work/notes come from this script.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from envhub_textarena.games import available
from envhub_textarena.solvers import SOLVERS

from envhub.policies import OraclePolicy, RandomPolicy
from envhub.rollout import run_batch


async def play(
    env_id: str, oracle: bool, episodes: int, opponent: str
) -> tuple[list[float], int, float, list[str]]:
    policy = OraclePolicy() if oracle else RandomPolicy(seed=0)
    batch = await run_batch(env_id, policy, episodes=episodes, seed=0, env_kwargs={"opponent": opponent})
    rewards = [e.reward for e in batch.episodes if e.error is None]
    finished = sum(1 for e in batch.episodes if e.reward_components.get("finished") == 1.0)
    turns = statistics.fmean(len([m for m in e.messages if m.role == "assistant"]) for e in batch.episodes)
    errors = [f"{e.error.kind}: {e.error.message[:120]}" for e in batch.episodes if e.error is not None]
    return rewards, finished, turns, errors


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--opponent", default="random")
    args = parser.parse_args()
    games = [g for g in available() if not args.names or g.name in args.names]
    print("| id | players | random mean | finished | turns | oracle mean | seconds | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for game in games:
        started = time.perf_counter()
        rewards, finished, turns, errors = await play(game.env_id, False, args.episodes, args.opponent)
        oracle = "-"
        if game.textarena_id.partition("-v0")[0] in SOLVERS:
            solved, _, _, oracle_errors = await play(game.env_id, True, args.episodes, args.opponent)
            oracle = f"{statistics.fmean(solved):.2f}" if solved else "error"
            errors += oracle_errors
        mean = f"{statistics.fmean(rewards):.2f}" if rewards else "-"
        seconds = time.perf_counter() - started
        print(
            f"| {game.env_id} | {game.players} | {mean} | {finished}/{args.episodes} | {turns:.1f} "
            f"| {oracle} | {seconds:.1f} | {'; '.join(errors)[:300]} |",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
