"""The agent seat of a verifiers env, played by whoever drives the envhub env.

A verifiers `Env.run(task, agents)` asks its agent for replies through `agent.run(task)` (one segment on
the task's prompt) or `agent.interaction(task)` (the env's code is the user: each `turn(message)` runs
one segment). verifiers fills the seat with a harness program calling a model over HTTP. Here the seat
is `PolicySeat`: each model call becomes an envhub observation, and the envhub action is the model's
reply. Between the two, this module does what verifiers' null harness and interception server do: the
tool loop (calls run on the task's toolsets, a segment ends on a reply without tool calls), the task's
`@vf.stop` and `@vf.intercept` hooks on the rollout's `RolloutSession`, the turns committed to the
trace's message graph, and at the end the task's own `score`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from envhub.integrations.verifiers.toolsets import ServedToolsets
from envhub.messages import Message

if TYPE_CHECKING:
    from verifiers.v1 import AgentConfig, Task, Toolset, Trace
    from verifiers.v1.agent import Segment
    from verifiers.v1.session import RolloutSession
    from verifiers.v1.types import AssistantMessage, Messages


class Truncated(Exception):
    """The envhub driver ran out of turns: the seat stops the rollout as verifiers' `max_turns` limit does."""


class Channel:
    """Where the seat meets the envhub driver: one model call out, one reply back, at a time."""

    def __init__(self) -> None:
        self.calls: asyncio.Queue[list[Message]] = asyncio.Queue()
        self.replies: asyncio.Queue[Message | None] = asyncio.Queue()

    async def ask(self, observation: list[Message]) -> Message:
        """Hand the driver what the model sees new, and wait for its reply (raises Truncated on None)."""
        await self.calls.put(observation)
        reply = await self.replies.get()
        if reply is None:
            raise Truncated
        return reply


class PolicySeat:
    """Stands in for verifiers' `Agent`: the two entry points an `Env.run` calls, `run` and `interaction`."""

    def __init__(
        self,
        config: AgentConfig,
        channel: Channel,
        shared: list[Toolset[Any, Any]],
        completed: list[Trace],
    ) -> None:
        self.config = config
        self.channel = channel
        self.shared = shared
        self.completed = completed

    async def run(self, task: Task[Any, Any, Any], **_: Any) -> Trace:
        """One segment on the task's prompt, then scoring, as verifiers' `Agent.run`."""
        exchange = Exchange(self, task)
        if await exchange.open():
            await exchange.segment(None)
            if exchange.ok:
                exchange.trace.stop("agent_completed")
        return await exchange.close()

    @asynccontextmanager
    async def interaction(self, task: Task[Any, Any, Any], **_: Any) -> AsyncIterator[Exchange]:
        """The env's code as the user, turn by turn, as verifiers' `Agent.interaction`."""
        exchange = Exchange(self, task)
        await exchange.open()
        try:
            yield exchange
        finally:
            await exchange.close()


class Exchange:
    """One rollout of the seat: verifiers' `Interaction` surface (`turn`, `trace`, `close`)."""

    def __init__(self, seat: PolicySeat, task: Task[Any, Any, Any]) -> None:
        from verifiers.v1 import AgentInfo, Trace, TraceTask
        from verifiers.v1.state import state_cls

        self.seat = seat
        self.task = task
        self.trace: Trace = Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            state=state_cls(type(task))(),
            agent=AgentInfo(config=seat.config),
        )
        self.session = _session(task, self.trace)
        self.history: Messages = []
        self._seen = 0  # messages of `history` the driver has been shown
        self._started = False
        self._over = False
        self._closed = False
        self._failure: BaseException | None = None
        self.tools: ServedToolsets | None = None
        self.tool_schemas: list[Any] = []

    @property
    def ok(self) -> bool:
        return self._failure is None and self.trace.stop_condition is None

    async def open(self) -> bool:
        """The task's tool servers up and its prompt in place (verifiers' `Rollout.open`, minus the box)."""
        from verifiers.v1.errors import ToolsetError
        from verifiers.v1.types import Tool

        toolsets = [*self.seat.shared, *self.task.toolsets(self.task.config)]
        try:
            for toolset in toolsets[len(self.seat.shared) :]:
                await toolset.setup()
                await toolset.setup_task(self.task)
            self.tools = ServedToolsets(toolsets, self.trace.state)
            specs = await self.tools.specs()
        except Exception as exc:
            self._fail(ToolsetError(f"starting the task's tool servers failed: {exc}"))
            return False
        self.tool_schemas = [
            Tool(name=s.name, description=s.description, parameters=s.parameters) for s in specs
        ]
        self.history = _opening(self.task)
        return True

    async def turn(self, message: str | Messages | None = None) -> Segment:
        """One user turn and the segment that answers it; the checks are verifiers' `Interaction.turn`'s."""
        from verifiers.v1.agent import Segment
        from verifiers.v1.dialects import parse_message
        from verifiers.v1.types import ToolMessage, UserMessage

        if self._closed:
            raise RuntimeError("this interaction is closed")
        if self._over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        prompted = not self._started and self.task.data.prompt is not None
        if message is None and not prompted:
            raise ValueError("nothing to run a turn on: this exchange takes its next user message")
        if message is not None and prompted:
            raise ValueError("the task's prompt opens this exchange: take its first reply with a bare turn()")
        messages: Messages | None = None
        if isinstance(message, str):
            messages = [UserMessage(content=message)]
        elif message is not None:
            messages = [parse_message(m) if isinstance(m, dict) else m for m in message]
        self._started = True
        turns_before = self.trace.num_turns
        nodes_before = len(self.trace.nodes)
        await self.segment(messages)
        if self.trace.num_turns > turns_before:
            produced: Messages = []
            saw_assistant = False
            for node in self.trace.nodes[nodes_before:]:
                if node.sampled:
                    produced.append(node.message)
                    saw_assistant = True
                elif saw_assistant and isinstance(node.message, ToolMessage):
                    produced.append(node.message)
            return Segment(messages=produced, root_reply=self.trace.root_reply)
        self._over = True
        return Segment(messages=[], terminated=True)

    async def segment(self, messages: Messages | None) -> None:
        """Model calls until a reply without tool calls, or until a stop, a limit or a failure ends it."""
        if not self.ok or self._closed:
            return
        if messages:
            self.history = [*self.history, *messages]
        try:
            while await self._model_call():
                pass
        except Truncated:
            self.trace.stop("max_turns")
        except Exception as exc:
            self._fail(exc)

    async def _model_call(self) -> bool:
        """One intercepted model call, as verifiers' interception server serves it; True: the loop goes on."""
        from verifiers.v1 import graph
        from verifiers.v1.types import Request

        if await self.session.refused() is not None:
            return False
        request = Request(messages=self.history, tools=self.tool_schemas or None)
        request, rewrites, stopped = await self.session.rewrite_request(request)
        self.trace.request_rewrites.extend(rewrites)
        turn = graph.prepare_turn(self.trace, request.messages, request.tools)
        if stopped is not None:
            turn.commit_prompt()
            self.trace.stop(stopped)
            return False
        observation = [_to_envhub(m) for m in request.messages[self._seen :]]
        try:
            reply = await self.seat.channel.ask(observation)
        except BaseException:
            turn.abandon()
            raise
        response, rewrites, stopped = await self.session.rewrite_response(_response(reply))
        node = turn.commit(response)
        self.session.consume_prepared(turn.tail)
        self.trace.response_rewrites.extend(rewrites)
        if stopped is None:
            stopped = await self.session.gate_tool_calls(node)
        self.history = [*request.messages, response.message]
        self._seen = len(self.history)
        if stopped is not None:
            self.trace.stop(stopped)
            return False
        if not response.message.tool_calls:
            return False
        await self._run_tools(response.message, node)
        return True

    async def _run_tools(self, assistant: AssistantMessage, node: int) -> None:
        """The harness's tool loop: each call runs (or gets the policy's verdict) and answers in order."""
        from verifiers.v1 import graph
        from verifiers.v1.types import Request, ToolMessage

        assert self.tools is not None
        branch = graph.path(self.trace, node)
        results: Messages = []
        for call in assistant.tool_calls or []:
            probe = ToolMessage(tool_call_id=call.id, content="", name=call.name)
            key = self.session.tool_result_keys(Request(messages=[*branch, probe]))[len(branch)]
            self.session.gated_tools.add(key)
            verdict = self.session.tool_decisions.get(key)
            if verdict is not None:
                results.append(verdict)
                continue
            content = await self._call_tool(call.name, call.arguments)
            results.append(ToolMessage(tool_call_id=call.id, content=content, name=call.name))
        self.history = [*self.history, *results]

    async def _call_tool(self, name: str, arguments: str) -> str:
        """The text a tool call answers with; malformed arguments are the agent's mistake, answered."""
        assert self.tools is not None
        try:
            parsed = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return f"error: invalid JSON in tool arguments ({exc}); resend the call with valid JSON"
        if not isinstance(parsed, dict):
            return f"error: tool arguments must be a JSON object, got {type(parsed).__name__}"
        return await self.tools.call(name, parsed)

    def _fail(self, error: BaseException) -> None:
        self._failure = error
        self.trace.record_error(error if isinstance(error, Exception) else RuntimeError(str(error)))

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    async def close(self) -> Trace:
        """Finish the rollout: stop it if it still runs, then score it (verifiers' `Rollout.close`)."""
        if self._closed:
            return self.trace
        self._closed = True
        trace = self.trace
        if self.ok:
            trace.stop("user_closed")
        if self._failure is None:
            try:
                await self.task.score(trace, None)
            except Exception as exc:
                self._fail(exc)
        trace.is_completed = True
        trace.ok = self._failure is None
        self.seat.completed.append(trace)
        return trace


def _session(task: Task[Any, Any, Any], trace: Trace) -> RolloutSession:
    """The rollout's session with the task's typed hooks sorted by boundary, as `Rollout.__init__` does."""
    from verifiers.v1 import EvalClientConfig, Request, Response, Trace
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.session import RolloutSession, hook_boundary
    from verifiers.v1.utils.decorators import discover_decorated

    intercepts = [(hook_boundary(fn, allow_trace=False), fn) for fn in discover_decorated(task, "intercept")]
    stops = [(hook_boundary(fn, allow_trace=True), fn) for fn in task.hooks("stop")]

    def on(boundary: type, hooks: list[tuple[type, Callable[..., Any]]]) -> list[Callable[..., Any]]:
        return [fn for kind, fn in hooks if kind is boundary]

    return RolloutSession(
        ctx=ModelContext(model="envhub-policy", client=EvalClientConfig(api_key_var="ENVHUB_UNUSED_KEY")),
        trace=trace,
        trace_stops=on(Trace, stops),
        request_interceptors=on(Request, intercepts),
        response_interceptors=on(Response, intercepts),
        request_stops=on(Request, stops),
        response_stops=on(Response, stops),
        gates_tools=True,
    )


def _opening(task: Task[Any, Any, Any]) -> Messages:
    """The conversation the null harness opens with: the system prompt, then the prompt."""
    from verifiers.v1.types import SystemMessage, UserMessage

    data = task.data
    prompt = data.prompt
    messages: Messages = (
        [] if prompt is None else [UserMessage(content=prompt)] if isinstance(prompt, str) else list(prompt)
    )
    if data.system_prompt:
        messages.insert(0, SystemMessage(content=data.system_prompt))
    return messages


def _response(reply: Message) -> Any:
    """The envhub action as the model response verifiers commits to the trace."""
    from verifiers.v1.dialects import parse_message
    from verifiers.v1.types import Response

    message = parse_message(reply.to_openai())
    return Response(
        id=f"envhub-{uuid.uuid4().hex[:12]}",
        created=int(time.time()),
        model="envhub-policy",
        message=message,
        finish_reason="tool_calls" if reply.tool_calls else "stop",
    )


def _to_envhub(message: Any) -> Message:
    """A verifiers message as envhub's (both speak OpenAI's chat format)."""
    from verifiers.v1.dialects.chat import message_to_wire

    return Message.from_openai(message_to_wire(message))
