"""A real plugin package, installed by the tests, to check discovery through entry points."""

import asyncio
import os
import random

import envhub


class Echo(envhub.SingleTurnEnv):
    """Repeat the word back."""

    def setup(self, rng: random.Random) -> str:
        self.word = rng.choice(["apple", "pear", "plum"])
        return f"Say {self.word}."

    @envhub.reward
    def said(self, answer: str) -> float:
        return float(answer.strip().lower() == self.word)


class LoudEcho(Echo):
    """Version 1: the word must be shouted."""

    @envhub.reward
    def said(self, answer: str) -> float:
        return float(answer.strip() == self.word.upper())


class Slow(envhub.MultiTurnEnv):
    """Each reply takes `delay` seconds: long enough batches to interrupt them for real.

    Episodes whose seed is `hold_from` or more wait in each reply until the file `release` exists, so a
    test interrupts a batch that cannot have finished, instead of guessing how long the batch takes.
    """

    max_turns = 3

    def __init__(self, delay: float = 0.01, hold_from: int | None = None, release: str = "") -> None:
        super().__init__()
        self.delay = delay
        self.hold_from = hold_from
        self.release = release

    def setup(self, rng: random.Random) -> str:
        self.secret = rng.randint(0, 1000)
        return "Guess."

    async def respond(self, text: str) -> str:
        await asyncio.sleep(self.delay)
        if self.hold_from is not None and self.seed is not None and self.seed >= self.hold_from:
            while not self._released():  # noqa: ASYNC110 - another process releases it, through a file
                await asyncio.sleep(0.01)
        return "no"

    def _released(self) -> bool:
        return os.path.exists(self.release)

    @envhub.reward
    def seed_echo(self) -> float:
        return float(self.secret)

    def reference_action(self, messages: list[envhub.Message]) -> str:
        return "1"
