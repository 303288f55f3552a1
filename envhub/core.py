"""The contract every envhub environment keeps: async `reset`, `step` and `close`, and a `spec`.

This is the one file a user needs to read to drive any environment. Authoring helpers that make the
contract short to implement live in `envhub.authoring`; nothing here knows about them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator
from types import TracebackType
from typing import Any, ClassVar, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from envhub.env_spec import EnvSpec as EnvSpec  # part of the contract, defined apart (see env_spec)
from envhub.env_spec import Provenance as Provenance
from envhub.env_spec import UnknownOptionError as UnknownOptionError
from envhub.env_spec import refuse_unknown_options
from envhub.messages import Message
from envhub.text_format import parse_assistant_text
from envhub.tools import ToolSpec

Observation = list[Message]
"""What the environment says after a reset or a step: the new messages only, not the whole history."""

Action = Message | str | dict[str, Any]
"""An assistant message; a plain string is its text, a dict is read in OpenAI's wire format."""


class _Info(BaseModel):
    """An `info` dict with the keys the runner reads typed; an env may add any others.

    Typed here so the authoring base classes that write them and the runner that reads them agree, and
    an env that writes one wrongly is told which key and why instead of storing nonsense.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    @classmethod
    def read(cls, info: dict[str, Any]) -> Self:
        """The info as this model; raises ValueError naming the key that has the wrong type."""
        try:
            return cls.model_validate(info)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"the environment's {cls.__name__} is malformed: {problems}") from None

    def as_info(self) -> dict[str, Any]:
        """The plain dict `reset`/`step` return: the keys given, typed ones checked, in their order."""
        return self.model_dump(exclude_unset=True)


class ResetInfo(_Info):
    """The keys of `reset`'s info that the runner stores with the episode."""

    seed: int | None = None
    """The effective seed (given, or drawn from the env's seed stream), so the episode can be replayed."""
    isolation: dict[str, Any] | None = None
    """The sandbox's isolation report as JSON (`IsolationReport.model_dump(mode="json")`)."""


class StepInfo(_Info):
    """The keys of `step`'s info that the runner reads: the final step's reward components and notes."""

    reward_components: dict[str, float] | None = None
    """Each `@reward` method's unweighted value, by name; written on the step that ends the episode."""
    reward_notes: dict[str, str] | None = None
    """Why a component scored what it did, by name (a judge that could not grade the answer)."""


class StepResult(NamedTuple):
    """One step's outcome; unpacks like gymnasium's `obs, reward, terminated, truncated, info`.

    A NamedTuple rather than a pydantic model because tuple unpacking is the contract users already know.
    """

    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class MalformedAction(ValueError):
    """An action that cannot be read as an assistant message; answered to the agent, never raised."""


class InfrastructureError(RuntimeError):
    """The machinery under an environment failed (a sandbox died, a grader service went away).

    Raised out of `step`, never shown to the agent as its own mistake: the runner records it as an
    infrastructure error and retries the episode with a fresh environment.
    """


class EpisodeStateError(RuntimeError):
    """The caller stepped an episode that was never reset or has already ended: a bug in the driver."""


class NotForkable(TypeError):
    """`Env.fork` was asked of an env that cannot copy its episode; the message says why and what to do."""


def check_forkable(env: Env) -> None:
    """Raise NotForkable, with the env's reason, when its class declares that it cannot fork."""
    if env.forkable is not True:
        why = env.forkable or "it declares forkable = False"
        raise NotForkable(f"{env!r} cannot fork: {why}")


def _resources(env: Env) -> Iterator[tuple[str, Any]]:
    """(attribute, value) for what `Env.__fork__` replaces rather than copies: values with a `__fork__`
    and asyncio primitives, among the env's attributes and the items of its container attributes."""
    for name, value in vars(env).items():
        items = value.values() if isinstance(value, dict) else value
        candidates = items if isinstance(value, list | tuple | set | frozenset | dict) else [value]
        for item in candidates:
            if isinstance(item, asyncio.Lock | asyncio.Event) or (
                hasattr(type(item), "__fork__") and not isinstance(item, type)
            ):
                yield name, item


_LIVE = (asyncio.AbstractEventLoop, asyncio.BaseTransport, asyncio.subprocess.Process, asyncio.Future)
"""What a deep copy must never reach: a process, a task, a connection or the loop they run on."""


def _refuse_live(env: Env, name: str, value: Any, memo: dict[int, Any]) -> None:
    """Raise NotForkable when an attribute is, or directly holds, something live (a Python REPL's
    process, say), rather than let a deep copy half-copy it: a fork copies state, not processes."""
    if id(value) in memo:
        return
    held = vars(value).items() if hasattr(value, "__dict__") and not isinstance(value, type) else ()
    for where, item in [("", value), *((f".{k}", v) for k, v in held)]:
        if isinstance(item, _LIVE) and id(item) not in memo:
            raise NotForkable(
                f"{env!r} cannot fork: its attribute {name!r}{where} is a live {type(item).__name__}, "
                "and a fork copies state, not processes, tasks or connections; give the env a "
                "__fork__ that puts what the child should hold in memo (a new one, or None to start "
                "afresh), or declare forkable = 'why not'"
            )


def _fresh_primitive(value: asyncio.Lock | asyncio.Event, name: str) -> asyncio.Lock | asyncio.Event:
    """A new lock or event for the child (asyncio's are bound to the loop that first waited on them);
    a lock held mid-fork means a call is still running."""
    if isinstance(value, asyncio.Lock) and value.locked():
        raise NotForkable(
            f"the lock {name!r} is held: a call is still running in the env; fork between steps"
        )
    if isinstance(value, asyncio.Event):
        fresh = asyncio.Event()
        if value.is_set():
            fresh.set()
        return fresh
    return asyncio.Lock()


def parse_action(action: Action) -> Message:
    """Read any accepted action form as an assistant message, or raise MalformedAction saying why."""
    if isinstance(action, str):
        message = parse_assistant_text(action)  # model text: its <tool_call> blocks are tool calls
    elif isinstance(action, Message):
        message = action
    elif isinstance(action, dict):
        try:
            message = Message.from_openai({"role": "assistant", **action})
        except (ValidationError, ValueError, TypeError, AttributeError, KeyError) as exc:
            raise MalformedAction(f"the message could not be read: {exc}") from exc
    else:
        raise MalformedAction(f"an action must be a message, a string or a dict, not {type(action).__name__}")
    if message.role != "assistant":
        raise MalformedAction(f"the action must be an assistant message, got role {message.role!r}")
    if not message.text.strip() and not message.tool_calls and not message.images:
        raise MalformedAction("the message is empty: reply with text or call a tool")
    return message


def recorded_action(action: Action) -> Message:
    """The action as history keeps it: the parsed message, or for a malformed one, what could be kept."""
    try:
        return parse_action(action)
    except MalformedAction:
        return Message(role="assistant", content=action if isinstance(action, str) else repr(action))


class Env(ABC):
    """An environment an agent talks to, one episode at a time.

    Implementations must never block the event loop: thousands of episodes share one loop.
    """

    spec: EnvSpec | None = None
    max_turns: int = 16
    """Steps before the episode is truncated; `make(..., max_turns=N)` overrides it."""
    reference_reward: ClassVar[float | None] = 1.0
    """What the env's reference solution (`reference_action`) earns; `envhub check` holds the oracle to
    it. None where no fixed figure exists (returns of stochastic games, scores outside 0..1)."""
    reset_options: ClassVar[dict[str, str] | None] = {}
    """The keys `reset(options=...)` accepts, each with what it does, e.g. `{"task": "the task id to
    play, instead of one drawn by the seed"}`; `reset` refuses any other (`check_reset_options`),
    naming these. None: options are passed on to what checks them itself (another server)."""
    forkable: ClassVar[bool | str] = True
    """Whether `fork` can copy an episode of this env: True, or a sentence saying why not and what to do
    instead (an env holding a live browser page, a remote connection)."""

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this env cannot be played on this machine (data its upstream does not ship, a newer
        Python, a paid external service), or None when it can: `envhub list` hides such ids unless
        asked, and `info` and `check` say why instead of failing on it. Read without making the env."""
        return None

    @property
    def tools(self) -> list[ToolSpec]:
        """The tools the agent may call in this environment; none by default."""
        return []

    def check_reset_options(self, options: dict[str, Any] | None) -> None:
        """Refuse `reset` options the env does not declare (`reset_options`), naming those it does:
        an option no code reads would otherwise be ignored, and the episode not be the one asked for.
        Every `reset` calls it first (the authoring bases' does)."""
        name = self.spec.id if self.spec else type(self).__name__
        refuse_unknown_options(name, options or {}, self.reset_options, at="reset")

    @abstractmethod
    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Start a new episode; the same seed gives the same episode."""

    @abstractmethod
    async def step(self, action: Action) -> StepResult:
        """Answer one agent turn. Malformed actions become an error observation, not an exception."""

    async def close(self) -> None:
        """Release what the environment holds (sandboxes, browsers, servers)."""
        return

    def reference_action(self, messages: list[Message]) -> Action | None:
        """The reference solution's next action given the conversation so far, if the env has one.

        The oracle policy plays this; environments without a reference solution return None.
        """
        return None

    async def fork(self, n: int = 1) -> list[Self]:
        """`n` independent envs in this env's state at this point of its episode: same messages, same
        tool state, a copy of each sandbox's files (processes are not carried: they start afresh).

        What one child does is never seen by another or by this env; each must be closed. Raises
        NotForkable, saying why, for an env that cannot copy itself (`forkable`).
        """
        if n < 1:
            raise ValueError(f"fork makes at least one child, got n={n}")
        check_forkable(self)
        children: list[Self] = []
        try:
            for _ in range(n):
                children.append(await self.__fork__({}))
        except BaseException:
            for child in children:
                with contextlib.suppress(Exception):  # the error worth raising is the first one
                    await asyncio.shield(child.close())
            raise
        return children

    async def __fork__(self, memo: dict[int, Any]) -> Self:
        """One child for `fork`: a deep copy of this env, in which every attribute value (or item of a
        list, tuple, set or dict attribute) with a `__fork__` of its own, a sandbox, is replaced by what
        that returns, and asyncio locks and events by new ones.

        Override it for state a deep copy cannot take (a client, a live process): put what the child
        should hold in `memo` first, keyed by the original's id (the original itself, to share it), then
        `return await super().__fork__(memo)`, as with `copy.deepcopy`'s memo.
        """
        forked: list[Any] = []
        try:
            for name, value in _resources(self):
                if id(value) in memo:
                    continue
                if isinstance(value, asyncio.Lock | asyncio.Event):
                    memo[id(value)] = _fresh_primitive(value, name)
                else:
                    memo[id(value)] = await value.__fork__(memo)
                    forked.append(memo[id(value)])
            child = object.__new__(type(self))
            memo[id(self)] = child
            for name, value in vars(self).items():
                _refuse_live(self, name, value, memo)
                try:
                    vars(child)[name] = copy.deepcopy(value, memo)
                except Exception as exc:
                    raise NotForkable(
                        f"{self!r} cannot fork: its attribute {name!r} ({type(value).__name__}) cannot be "
                        f"copied ({type(exc).__name__}: {exc}); give the env a __fork__ that puts what "
                        "the child should hold in memo, or declare forkable = 'why not'"
                    ) from exc
        except BaseException:
            for resource in forked:
                with contextlib.suppress(Exception):
                    await asyncio.shield(resource.close())  # sandboxes and envs: all have close()
            raise
        return child

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        name = self.spec.id if self.spec else type(self).__name__
        return f"<{type(self).__name__} {name}>"
