"""Seeded, verifiable games for envhub; the worked example of docs/authoring.md."""

from envhub_games.arithmetic import Arithmetic
from envhub_games.countdown import Countdown
from envhub_games.guess_number import GuessNumber

__all__ = ["Arithmetic", "Countdown", "GuessNumber"]
