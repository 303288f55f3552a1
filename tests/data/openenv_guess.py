"""A guessing game written in OpenEnv's own server-side classes and served by its own app factory.

`uvicorn openenv_guess:app` serves it as any OpenEnv env is served. The seed draws the number (1-100),
a guess is answered 'higher', 'lower' or 'correct' (reward 1, done), and a guess of 0 makes the env's
machinery fail, so that a server-side failure can be asked for.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from openenv.core.env_server import (  # type: ignore[import-untyped]
    Action,
    Environment,
    Observation,
    State,
    create_app,
)
from pydantic import Field


class GuessAction(Action):  # type: ignore[misc]
    """A guess at the hidden number."""

    guess: int = Field(..., ge=0, le=100, description="The number guessed (0 breaks the env's machinery)")


class GuessObservation(Observation):  # type: ignore[misc]
    """The answer to a guess."""

    hint: str = Field(default="", description="'higher', 'lower', 'correct', or the task at reset")


class GuessEnvironment(Environment):  # type: ignore[misc]
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)
        self._target = 0

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any
    ) -> GuessObservation:
        self._target = random.Random(seed).randint(1, 100)
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return GuessObservation(hint="Guess my number between 1 and 100.", reward=0.0, done=False)

    def step(self, action: GuessAction) -> GuessObservation:
        if action.guess == 0:
            raise RuntimeError("the number store went away")
        self._state.step_count += 1
        if action.guess == self._target:
            return GuessObservation(hint="correct", reward=1.0, done=True)
        return GuessObservation(hint="higher" if action.guess < self._target else "lower", reward=0.0)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=8)
