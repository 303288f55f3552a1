"""envhub-trainer: GRPO over envhub environments, token-in/token-out, with a synced rollout engine."""

from envhub_trainer.config import TrainConfig, load_config
from envhub_trainer.loss import LossConfig

__all__ = ["LossConfig", "TrainConfig", "load_config"]
