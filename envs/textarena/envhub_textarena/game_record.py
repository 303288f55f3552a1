"""One textarena game as envhub lists it: the record the catalogue is made of.

Its own module because the generated catalogue (`catalog`), the env class (`env`) and the per-id classes
(`games`) all name it, and `games` reads the catalogue and builds on `env`: with the record in `games`,
each of the two imported `games` back.
"""

from __future__ import annotations

import sys
from typing import NamedTuple


class Game(NamedTuple):
    """One textarena game as envhub lists it."""

    name: str
    """envhub's name: the id is `textarena/<name>-v0`."""
    textarena_id: str
    """The id `textarena.make` takes, e.g. 'TicTacToe-v0'."""
    players: int
    """Seats in the game: the agent plays seat 0, the built-in opponent every other seat."""
    unavailable: str | None = None
    """Why the game cannot run here (network, an external model, missing data), or None."""
    requires_python: str | None = None
    """The Python version whose syntax the game's module needs, when newer than ours."""

    @property
    def env_id(self) -> str:
        return f"textarena/{self.name}-v0"

    @property
    def reason(self) -> str | None:
        """Why this game cannot be made on this interpreter, or None when it can."""
        if self.requires_python is not None:
            major, minor = (int(p) for p in self.requires_python.split("."))
            if sys.version_info < (major, minor):
                return self.unavailable
            return None
        return self.unavailable
