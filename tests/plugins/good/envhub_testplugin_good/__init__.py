"""A real plugin package, installed by the tests, to check discovery through entry points."""

import asyncio
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
    """Each reply takes `delay` seconds: long enough batches to interrupt them for real."""

    max_turns = 3

    def __init__(self, delay: float = 0.01) -> None:
        super().__init__()
        self.delay = delay

    def setup(self, rng: random.Random) -> str:
        self.secret = rng.randint(0, 1000)
        return "Guess."

    async def respond(self, text: str) -> str:
        await asyncio.sleep(self.delay)
        return "no"

    @envhub.reward
    def seed_echo(self) -> float:
        return float(self.secret)

    def reference_action(self, messages: list[envhub.Message]) -> str:
        return "1"
