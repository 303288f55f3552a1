"""envhub-gym-text: gymnasium's text games (and any installed env with a text render) as multi-turn envs."""

from envhub_gym_text.as_text import toy_text_ids
from envhub_gym_text.env import GymText, UnsupportedGymEnv, gym_text_class, plain_text
from envhub_gym_text.namespace import factory_for

__all__ = ["GymText", "UnsupportedGymEnv", "factory_for", "gym_text_class", "plain_text", "toy_text_ids"]
