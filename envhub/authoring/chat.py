"""The shared episode loop of the authoring base classes: seeding, turn counting, errors, rewards.

Subclasses only say how the environment reacts to one well-formed assistant message (`react`), so the
rules every environment must keep (malformed actions answered, turns counted, truncation, reward
components recorded) live in one place.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from collections.abc import Awaitable, Mapping
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict

from envhub.author_code import call_author_code
from envhub.authoring.rewards import score
from envhub.core import (
    Action,
    EpisodeStateError,
    MalformedAction,
    Observation,
    ResetInfo,
    StepInfo,
    StepResult,
    parse_action,
    recorded_action,
)
from envhub.core import Env as BaseEnv
from envhub.messages import Message, system, user
from envhub.tools import tool_name


class Reaction(BaseModel):
    """How the environment answered one assistant message."""

    model_config = ConfigDict(frozen=True)

    observation: list[Message]
    done: bool = False
    reward: float = 0.0
    info: dict[str, Any] = {}


class ChatEnv(BaseEnv):
    """Base of `SingleTurnEnv`, `MultiTurnEnv` and `ToolEnv`: a conversation scored by `@reward` methods.

    Authors implement `setup(rng)`, which draws the task and returns the prompt; everything random must
    come from `rng` so that the same seed gives the same episode.
    """

    system_prompt: str | None = None
    reward_weights: Mapping[str, float] = MappingProxyType({})
    """Per-instance weights by component name, over the `@reward` decorators' (a constructor option's)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse a subclass whose names would replace the episode loop's own: a tool method called
        `answer` made `self.answer` (what every `@reward` grades) a bound method, and scored it."""
        super().__init_subclass__(**kwargs)
        for name, attr in vars(cls).items():
            if callable(attr) and tool_name(attr) is not None and hasattr(ChatEnv, name):
                raise TypeError(
                    f"{cls.__name__}.{name} is a tool, but {name!r} is ChatEnv's own; name the method "
                    f"otherwise and keep the tool's name: @envhub.tool(name={name!r})"
                )
        if "answer" in vars(cls) and not isinstance(vars(cls)["answer"], property):
            raise TypeError(
                f"{cls.__name__}.answer must stay a property returning the final answer's text (the "
                "@reward methods grade it); to grade something else, define it as @property"
            )

    def __init__(self, *, max_turns: int | None = None) -> None:
        if max_turns is not None:
            if max_turns < 1:
                raise ValueError(f"max_turns must be at least 1, got {max_turns}")
            self.max_turns = max_turns
        self.messages: list[Message] = []
        self.options: dict[str, Any] = {}
        self.turn = 0
        self.seed: int | None = None
        self._seed_stream = random.Random()
        self._running = False

    @abstractmethod
    def setup(self, rng: random.Random) -> str | list[Message] | Awaitable[str | list[Message]]:
        """Draw a task from `rng` and return the prompt (text, or messages for images).

        May be `async def` when setting up needs I/O (starting a sandbox, a server).
        """

    @abstractmethod
    async def react(self, message: Message) -> Reaction:
        """Answer one well-formed assistant message."""

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self.check_reset_options(options)
        if seed is not None:
            self._seed_stream.seed(seed)
            self.seed = seed
        else:
            self.seed = self._seed_stream.getrandbits(63)
        self.options = dict(options or {})
        self.turn = 0
        prompt = await call_author_code(self.setup, random.Random(self.seed))
        observation = [user(prompt)] if isinstance(prompt, str) else list(prompt)
        if self.system_prompt:
            observation.insert(0, system(self.system_prompt))
        self.messages = list(observation)
        self._running = True
        info = {"seed": self.seed, "turn": 0, "tools": [t.name for t in self.tools], **self.reset_info()}
        return observation, ResetInfo.read(info).as_info()

    def reset_info(self) -> dict[str, Any]:
        """Extra facts for the reset `info`, e.g. `{"isolation": sandbox.report()}` to store per episode."""
        return {}

    async def step(self, action: Action) -> StepResult:
        """Answer one action. A string is model text: its `<tool_call>` blocks are tool calls, the same
        rule the gymnasium adapter and `envhub play` follow (`envhub.text_format`)."""
        if not self._running:
            raise EpisodeStateError(
                "step() called with no episode running: call reset() first (episodes end when "
                "terminated or truncated is True)"
            )
        self.turn += 1
        info: dict[str, Any] = {"turn": self.turn}
        try:
            message = parse_action(action)
        except MalformedAction as exc:
            self.messages.append(recorded_action(action))
            reaction = Reaction(observation=[user(f"Error: {exc}")])
            info["error"] = {"kind": "malformed_action", "message": str(exc)}
        else:
            self.messages.append(message)
            reaction = await self.react(message)
        info.update(reaction.info)
        self.messages.extend(reaction.observation)
        terminated = reaction.done
        truncated = not terminated and self.turn >= self.max_turns
        reward = reaction.reward
        if terminated or truncated:
            self._running = False
            final, components = await score(self, answer=self.answer, messages=self.messages)
            reward += final
            info["reward_components"] = components
            if notes := getattr(self, "reward_notes", None):  # why a component scored 0 (a judge's refusal)
                info["reward_notes"] = dict(notes)
            info = StepInfo.read(info).as_info()
        return StepResult(reaction.observation, reward, terminated, truncated, info)

    @property
    def answer(self) -> str:
        """The agent's final answer: the text of its last message."""
        for message in reversed(self.messages):
            if message.role == "assistant":
                return message.text
        return ""
