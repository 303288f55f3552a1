"""`vision-v0`: one image question, one answer, scored host-side against the answer drawn with it."""

from __future__ import annotations

import random
import re

import envhub
from envhub.grading.hedges import HEDGE_NOTE, answer_line, extra_candidates
from envhub.messages import ContentPart, ImagePart, Message, TextPart, user
from envhub_vision.tasks import CODE_ALPHABET, KINDS, VisionTask, integers

_CODE = re.compile(rf"(?<![A-Z0-9])[{CODE_ALPHABET}]{{6}}(?![A-Z0-9])")


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
        self.reward_notes: dict[str, str] = {}

    def setup(self, rng: random.Random) -> list[Message]:
        kind = self.kind or rng.choice(sorted(KINDS))
        self.task = KINDS[kind](rng, self.width, self.height)
        self.reward_notes = {}
        content: list[ContentPart] = [TextPart(text=self.task.question)]
        content += [ImagePart(data=image) for image in self.task.images]
        return [user(content)]

    def reset_info(self) -> dict[str, object]:
        assert self.task is not None
        return {"kind": self.task.kind}

    @envhub.reward
    def correct(self, answer: str) -> float:
        """1 when the task's grader accepts the reply; a reply whose answer line names more candidate
        answers than an answer holds ("0 or 1", two codes) scores 0 with a note."""
        assert self.task is not None
        if not self.task.grade(answer):
            return 0.0
        if self.hedged(answer):
            self.reward_notes["correct"] = HEDGE_NOTE
            return 0.0
        return 1.0

    def hedged(self, answer: str) -> bool:
        """Whether the answer line names several candidates: codes for read-text, else more numbers
        than the answer holds (a grid cell's row and column are small numbers the question also names,
        so none is excused for being in the question)."""
        assert self.task is not None
        if self.task.kind == "read-text":
            return len(set(_CODE.findall(answer_line(answer).upper()))) > 1
        needed = len(integers(self.task.answer.replace(":", " ")))
        return extra_candidates(answer, [], needed)

    def reference_action(self, messages: list[Message]) -> envhub.Action:
        assert self.task is not None
        return self.task.answer
