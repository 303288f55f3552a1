"""Reference moves for games with an easy scripted winner, read from the game's hidden state.

Each solver takes the textarena env (as `TextArenaGame` holds it) and returns the agent's next move.
They are the oracle (`--policy oracle`) of their games; the other games have none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def guess_the_number(env: Any) -> str:
    """The hidden number itself."""
    return f"[{env.state.game_state['game_number']}]"


def mastermind(env: Any) -> str:
    """The secret code itself."""
    return "[" + " ".join(str(n) for n in env.state.game_state["secret_code"]) + "]"


def tower_of_hanoi(env: Any) -> str:
    """The next move of the shortest solution from the current towers (all disks onto C)."""
    towers: dict[str, list[int]] = env.state.game_state["towers"]
    move = _hanoi_move(towers, max((d for t in towers.values() for d in t), default=0), "C")
    if move is None:
        return "[A C]"  # already solved: the game has ended before this is asked
    return f"[{move[0]} {move[1]}]"


def _hanoi_move(towers: dict[str, list[int]], disk: int, target: str) -> tuple[str, str] | None:
    """The next move that brings disks 1..`disk` onto `target`, or None when they are already there."""
    if disk == 0:
        return None
    source = next(peg for peg, disks in towers.items() if disk in disks)
    if source == target:
        return _hanoi_move(towers, disk - 1, target)
    spare = next(peg for peg in towers if peg not in (source, target))
    return _hanoi_move(towers, disk - 1, spare) or (source, target)


SOLVERS: dict[str, Callable[[Any], str]] = {
    "GuessTheNumber": guess_the_number,
    "Mastermind": mastermind,
    "TowerOfHanoi": tower_of_hanoi,
}
"""textarena game family (the id before '-v0') -> its solver."""
