"""Base classes that make writing an environment short; each is an `envhub.Env`."""

from envhub.authoring.chat import ChatEnv, Reaction
from envhub.authoring.multi_turn import MultiTurnEnv, Reply
from envhub.authoring.rewards import reward
from envhub.authoring.single_turn import SingleTurnEnv
from envhub.authoring.tool_env import ToolEnv

__all__ = ["ChatEnv", "MultiTurnEnv", "Reaction", "Reply", "SingleTurnEnv", "ToolEnv", "reward"]
