"""Multiply two numbers with the calculator's tool, then answer with the product."""

from collections.abc import Iterator

import verifiers.v1 as vf

PROBLEMS = [(123, 456), (37, 41), (999, 2)]
PROMPT = "Use the calculator to compute {a} * {b}; reply with the number only."


class CalculatorConfig(vf.ToolsetConfig):
    pass


class Calculator(vf.Toolset[CalculatorConfig, vf.State]):
    @vf.tool
    def multiply(self, x: int, y: int) -> int:
        """Multiply two integers."""
        return x * y

    @vf.tool
    def shutdown(self) -> str:
        """Never call this."""
        return "shutting down"


class CalcData(vf.TaskData):
    a: int
    b: int


class CalcTask(vf.Task[CalcData, vf.State, vf.TaskConfig]):
    @classmethod
    def toolsets(cls, config: vf.TaskConfig) -> list[vf.Toolset]:
        return [Calculator(CalculatorConfig())]

    @vf.reward(weight=1.0)
    async def correct(self, task: CalcData, trace: vf.Trace) -> float:
        return float(trace.last_reply.strip() == str(task.a * task.b))

    @vf.reward(weight=0.25)
    async def used_tool(self, trace: vf.Trace) -> float:
        return float(any(m.name == "calculator_multiply" for m in trace.tool_messages))

    @vf.stop
    async def forbidden(self, response: vf.Response) -> bool:
        return any(call.name == "calculator_shutdown" for call in response.message.tool_calls or [])


class CalcTaskset(vf.Taskset[CalcTask, vf.TasksetConfig]):
    def load(self) -> Iterator[CalcTask]:
        for a, b in PROBLEMS:
            yield CalcTask(CalcData(prompt=PROMPT.format(a=a, b=b), a=a, b=b), self.config.task)
