"""textarena draws from the global `random` (and numpy) state: give each episode its own, one at a time.

`textarena.State(seed=...)` calls `random.seed` and the games keep drawing from the global generator
while they run (2048's new tiles, the dealer's cards). Episodes share one process and run concurrently,
so each keeps its own copy of that state and swaps it in, under one lock, around every call into
textarena: the same seed then gives the same game however many episodes run beside it.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_LOCK = threading.RLock()


def _numpy_random() -> Any | None:
    numpy = sys.modules.get("numpy")
    return None if numpy is None else numpy.random


class GlobalRandom:
    """The global random state of one textarena game, swapped in while the game runs."""

    def __init__(self, seed: int) -> None:
        self.state = random.Random(seed).getstate()
        self.seed = seed
        self.numpy_state: Any | None = None

    @contextmanager
    def active(self) -> Iterator[None]:
        """Run textarena code with this game's random state, restoring the process's afterwards."""
        with _LOCK:
            saved = random.getstate()
            np_random = _numpy_random()
            np_saved = np_random.get_state() if np_random is not None else None
            random.setstate(self.state)
            if np_random is not None:
                if self.numpy_state is None:
                    np_random.seed(self.seed % 2**32)
                else:
                    np_random.set_state(self.numpy_state)
            try:
                yield
            finally:
                self.state = random.getstate()
                random.setstate(saved)
                np_random = _numpy_random()
                if np_random is not None:
                    self.numpy_state = np_random.get_state()
                    if np_saved is not None:
                        np_random.set_state(np_saved)


@contextmanager
def unchanged_random() -> Iterator[None]:
    """Run code (a move tried on a copy of the game) without moving the global random state."""
    saved = random.getstate()
    np_random = _numpy_random()
    np_saved = np_random.get_state() if np_random is not None else None
    try:
        yield
    finally:
        random.setstate(saved)
        np_random = _numpy_random()
        if np_random is not None and np_saved is not None:
            np_random.set_state(np_saved)
