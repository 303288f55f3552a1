"""TextArena's games for envhub: `envhub.make("textarena/tic-tac-toe")`.

Ids are `textarena/<name>-v0`, one per textarena game (its `-raw`/`-train` wrapper variants aside);
`envhub_textarena.games.unavailable()` lists those that cannot run here and why.
"""

from envhub_textarena.games import Game, available, unavailable

__all__ = ["Game", "available", "unavailable"]
