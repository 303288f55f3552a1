"""`vision-v0`: one image question, one answer, scored host-side against the answer drawn with it."""

from __future__ import annotations

import random

import envhub
from envhub.messages import ContentPart, ImagePart, Message, TextPart, user
from envhub_vision.tasks import KINDS, VisionTask


class Vision(envhub.SingleTurnEnv):
    """Questions about procedurally drawn images: counting, charts, differences, text, locating, clocks."""

    system_prompt = "Answer the question about the image(s). Put your final answer on the last line."

    def __init__(self, kind: str | None = None, *, width: int = 320, height: int = 240) -> None:
        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; choose one of {', '.join(KINDS)} (or None for all)")
        if not (64 <= width <= 2048 and 64 <= height <= 2048):
            raise ValueError(f"width and height must be between 64 and 2048 pixels, got {width}x{height}")
        super().__init__()
        self.kind = kind
        self.width, self.height = width, height
        self.task: VisionTask | None = None

    def setup(self, rng: random.Random) -> list[Message]:
        kind = self.kind or rng.choice(sorted(KINDS))
        self.task = KINDS[kind](rng, self.width, self.height)
        content: list[ContentPart] = [TextPart(text=self.task.question)]
        content += [ImagePart(data=image) for image in self.task.images]
        return [user(content)]

    def reset_info(self) -> dict[str, object]:
        assert self.task is not None
        return {"kind": self.task.kind}

    @envhub.reward
    def correct(self, answer: str) -> float:
        assert self.task is not None
        return float(self.task.grade(answer))

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        assert self.task is not None
        return self.task.answer
