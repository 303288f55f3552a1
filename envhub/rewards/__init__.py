"""Learned graders as rewards: LLM judges that grade against a rubric, and reward models that score.

Both are infrastructure from an episode's point of view: when they fail they raise an
`envhub.InfrastructureError` subclass, and the runner retries the episode rather than scoring the agent
zero for a grader's fault. See docs/judges.md.
"""

from envhub.rewards.cache import JudgeCache
from envhub.rewards.judge import Criterion, JudgeError, JudgeVerdict, LLMJudge, Rubric
from envhub.rewards.reward_model import (
    HTTPRewardModel,
    LocalRewardModel,
    RewardModel,
    RewardModelError,
)

__all__ = [
    "Criterion",
    "HTTPRewardModel",
    "JudgeCache",
    "JudgeError",
    "JudgeVerdict",
    "LLMJudge",
    "LocalRewardModel",
    "RewardModel",
    "RewardModelError",
    "Rubric",
]
