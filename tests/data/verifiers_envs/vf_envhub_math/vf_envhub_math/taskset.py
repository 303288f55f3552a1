"""Sums of two numbers; the answer goes in \\boxed{}."""

from collections.abc import Iterator

import verifiers.v1 as vf

SYSTEM_PROMPT = "Solve the problem. Put the final answer in \\boxed{}."
PROBLEMS = [(2, 3), (17, 25), (120, 99), (7, 8)]


class MathData(vf.TaskData):
    answer: str


class MathTask(vf.Task[MathData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def correct(self, task: MathData, trace: vf.Trace) -> float:
        """1 when the boxed answer equals the sum."""
        return float(vf.extract_boxed_answer(trace.last_reply) == task.answer)

    @vf.reward(weight=0.5)
    async def boxed(self, trace: vf.Trace) -> float:
        """1 when the reply has a boxed answer at all."""
        return float("\\boxed{" in trace.last_reply)

    @vf.metric
    async def reply_length(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply))


class MathConfig(vf.TasksetConfig):
    limit: int = len(PROBLEMS)


class MathTaskset(vf.Taskset[MathTask, MathConfig]):
    def load(self) -> Iterator[MathTask]:
        for a, b in PROBLEMS[: self.config.limit]:
            yield MathTask(
                MathData(prompt=f"What is {a} + {b}?", system_prompt=SYSTEM_PROMPT, answer=str(a + b)),
                self.config.task,
            )
