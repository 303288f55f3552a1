"""Moved to `envhub.inference.batching`; this name stays until the trainer's imports follow."""

from envhub.inference.batching import MicroBatcher

__all__ = ["MicroBatcher"]
