"""envhub-vision: image questions drawn from a seed, each with one answer a program can check."""

from envhub_vision.env import Vision
from envhub_vision.tasks import KINDS, VisionTask

__all__ = ["KINDS", "Vision", "VisionTask"]
