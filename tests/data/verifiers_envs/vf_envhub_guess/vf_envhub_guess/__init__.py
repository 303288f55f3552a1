"""A guessing game whose env plays the user turn by turn (a verifiers v1 Env with its taskset)."""

from vf_envhub_guess.env import GuessEnv, GuessTaskset

__all__ = ["GuessEnv", "GuessTaskset"]
