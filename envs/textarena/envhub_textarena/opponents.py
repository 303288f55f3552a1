"""The built-in opponents that play every seat but the agent's: legal moves found by trying them on a copy.

textarena has no list of legal moves, but every game says what it refuses: an illegal move calls
`state.set_invalid_move`. So an opponent reads candidate moves from what its seat has seen (the
bracketed moves the game lists or shows as examples, the same examples with other numbers, then a line
of plain text for games that are played in words), tries each on a deep copy of the game, and keeps
those the game accepts.

- `random`: a uniformly random move among the candidates the game accepts (the default);
- `greedy`: a move that wins the game at once when there is one, else as `random`.

When no candidate is accepted, the opponent sends its first candidate anyway and the game's own rule
for invalid moves applies (textarena's usual rule: a second invalid move in a row loses).
"""

from __future__ import annotations

import copy
import random
import re
from typing import Any, Protocol

from envhub_textarena.seeding import unchanged_random

BRACKETED = re.compile(r"\[([^\[\]\n]{1,60})\]")
INTEGER = re.compile(r"\d+")
PLAIN_TEXT = ("I will think about it.", "Yes.", "No.")
MAX_TRIES = 48
NUMBER_VARIANTS = 12


class Opponent(Protocol):
    name: str

    def act(self, env: Any, player_id: int, seen: str) -> str:
        """The move for seat `player_id` of the textarena game `env`, given the text that seat has seen."""


def candidates(seen: str, rng: random.Random) -> list[str]:
    """Moves to try, in a random order: the game's bracketed moves and numeric variants of them, then text."""
    listed = list(dict.fromkeys(f"[{m.strip()}]" for m in BRACKETED.findall(seen) if m.strip()))
    numbers = [int(n) for n in INTEGER.findall(seen) if len(n) <= 3]
    high = max([9, *(n for n in numbers if n <= 100)])
    variants: list[str] = []
    for move in listed:
        if INTEGER.search(move):
            for _ in range(NUMBER_VARIANTS):
                variants.append(INTEGER.sub(lambda _m: str(rng.randint(0, high)), move))
    moves = list(dict.fromkeys(listed + variants))
    rng.shuffle(moves)
    return moves[:MAX_TRIES] + list(PLAIN_TEXT)


def try_move(env: Any, action: str) -> tuple[bool, dict[int, float] | None]:
    """(whether the game accepts `action`, the rewards if it ends the game) on a copy of `env`."""
    trial = copy.deepcopy(env)
    refused: list[str] = []
    state = trial.state
    original = state.set_invalid_move

    def refuse(*args: Any, **kwargs: Any) -> Any:
        refused.append("invalid")
        return original(*args, **kwargs)

    state.set_invalid_move = refuse
    with unchanged_random():
        try:
            done, _ = trial.step(action)
        except Exception:
            return False, None
    if refused:
        return False, None
    rewards = state.rewards if done else None
    return True, dict(rewards) if rewards else None


class RandomOpponent:
    """A random legal move (see the module docstring for how moves are found)."""

    name = "random"

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def act(self, env: Any, player_id: int, seen: str) -> str:
        moves = candidates(seen, self.rng)
        for move in moves:
            if try_move(env, move)[0]:
                return move
        return moves[0]


class GreedyOpponent(RandomOpponent):
    """A move that wins at once when there is one; otherwise a random legal move."""

    name = "greedy"

    def act(self, env: Any, player_id: int, seen: str) -> str:
        moves = candidates(seen, self.rng)
        legal = []
        for move in moves:
            accepted, rewards = try_move(env, move)
            if not accepted:
                continue
            others = max((v for p, v in (rewards or {}).items() if p != player_id), default=float("-inf"))
            if rewards and rewards.get(player_id, 0) > others:
                return move
            legal.append(move)
        return legal[0] if legal else moves[0]


OPPONENTS: dict[str, type[RandomOpponent]] = {"random": RandomOpponent, "greedy": GreedyOpponent}
