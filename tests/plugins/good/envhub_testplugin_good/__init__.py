"""A real plugin package, installed by the tests, to check discovery through entry points."""

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
