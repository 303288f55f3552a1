"""Find a secret number from "higher" / "lower" feedback: multi-turn reasoning over the conversation."""

from __future__ import annotations

import itertools
import random

import envhub
from envhub.messages import Message
from envhub_games.answers import last_integer


class GuessNumber(envhub.MultiTurnEnv):
    """A secret integer in [low, high]; each guess is answered "higher", "lower" or "correct"."""

    def __init__(self, low: int = 1, high: int = 100, *, max_turns: int | None = None) -> None:
        if low >= high:
            raise ValueError(f"low must be below high, got low={low}, high={high}")
        super().__init__(max_turns=max_turns if max_turns is not None else (high - low).bit_length() + 2)
        self.low, self.high = low, high
        self.secret = low
        self.guesses: list[int] = []

    def setup(self, rng: random.Random) -> str:
        self.secret = rng.randint(self.low, self.high)
        self.guesses = []
        return (
            f"I am thinking of an integer between {self.low} and {self.high}. Guess it: reply with one "
            f"number per message and I will say 'higher' or 'lower'. You have {self.max_turns} guesses."
        )

    def respond(self, text: str) -> str | envhub.Reply:
        guess = last_integer(text)
        if guess is None:
            return f"Please reply with a single integer between {self.low} and {self.high}."
        self.guesses.append(guess)
        if guess == self.secret:
            return envhub.Reply(text="Correct!", done=True)
        return "higher" if guess < self.secret else "lower"

    @envhub.reward
    def solved(self) -> float:
        return float(bool(self.guesses) and self.guesses[-1] == self.secret)

    @envhub.reward(weight=0.0)
    def guesses_used(self) -> float:
        """Recorded for analysis, not rewarded."""
        return float(len(self.guesses))

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        """Binary search, reading the bounds back from the feedback in the conversation."""
        low, high = self.low, self.high
        for guess_message, feedback in itertools.pairwise(messages):
            guess = last_integer(guess_message.text)
            if guess_message.role != "assistant" or guess is None:
                continue
            if feedback.text == "higher":
                low = max(low, guess + 1)
            elif feedback.text == "lower":
                high = min(high, guess - 1)
        return str((low + high) // 2)
