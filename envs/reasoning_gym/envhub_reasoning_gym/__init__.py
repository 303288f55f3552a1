"""Reasoning Gym's procedural datasets as envhub environments, one per dataset: `reasoning-gym/<name>-v0`."""

from envhub_reasoning_gym.env import (
    ReasoningGymEnv,
    dataset_names,
    env_class,
    env_id,
    options,
    reference_answer,
)

__all__ = ["ReasoningGymEnv", "dataset_names", "env_class", "env_id", "options", "reference_answer"]
