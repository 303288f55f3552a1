"""`make()` keeps the turn limit and the turn order for any env, even one that ignores both itself."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

import envhub
from envhub.core import Action, Observation, StepResult
from envhub.integrations.gymnasium import to_gymnasium
from envhub.messages import Message, ToolCall, tool_result, user
from envhub.policies import Policy
from envhub.policies.scripted import ScriptedPolicy
from envhub.record import tape as tapes
from envhub.registration import Registry, registry
from envhub.rollout import rollout, run_episode
from envhub.tools import ToolSpec
from envhub.wrappers import unwrap

ENV = "tests/ignores-limits-v0"


class IgnoresLimits(envhub.Env):
    """An env written straight on the contract that neither counts turns nor checks the order: it
    answers every step, forever, and never ends an episode unless told "stop"."""

    def __init__(self, greeting: str = "hello") -> None:
        self.greeting = greeting
        self.steps = 0

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        self.steps = 0
        return [user(self.greeting)], {"seed": seed}

    async def step(self, action: Action) -> StepResult:
        self.steps += 1
        done = isinstance(action, str) and action == "stop"
        return StepResult([user(f"step {self.steps}")], 0.0, done, False, {})


@pytest.fixture
def made() -> Registry:
    local = Registry(discover_plugins=False)
    local.register(ENV, IgnoresLimits)
    return local


async def test_an_env_that_ignores_max_turns_is_truncated_at_it(made: Registry) -> None:
    env = made.make(ENV, max_turns=2)
    await env.reset(seed=0)
    first, second = await env.step("a"), await env.step("b")
    assert (first.truncated, second.truncated) == (False, True)
    assert not second.terminated
    with pytest.raises(envhub.EpisodeStateError, match="call reset\\(\\) first"):
        await env.step("c")  # the env itself would have answered a third step
    assert unwrap(env).steps == 2  # type: ignore[attr-defined]


async def test_a_limit_set_after_make_holds_too(made: Registry) -> None:
    env = made.make(ENV)
    env.max_turns = 1  # as the SkyRL adapter and older callers do
    await env.reset()
    assert (await env.step("a")).truncated
    await env.reset()  # a new episode counts from zero
    assert (await env.step("a")).truncated


async def test_stepping_before_reset_or_after_the_end_is_refused(made: Registry) -> None:
    env = made.make(ENV)
    with pytest.raises(envhub.EpisodeStateError, match="call reset\\(\\) first"):
        await env.step("hi")
    await env.reset()
    assert (await env.step("stop")).terminated
    with pytest.raises(envhub.EpisodeStateError):
        await env.step("again")
    await env.reset()
    assert not (await env.step("again")).terminated


async def test_the_made_env_still_reads_as_its_own_class(made: Registry) -> None:
    env = made.make(ENV, greeting="hi")
    assert isinstance(env, IgnoresLimits) and isinstance(env, envhub.Env)
    assert type(unwrap(env)) is IgnoresLimits
    assert env.greeting == "hi"
    env.greeting = "hey"  # written to the env, not the wrapper
    assert unwrap(env).greeting == "hey"  # type: ignore[attr-defined]
    assert env.spec is not None and env.spec.id == ENV and env.spec.env_kwargs == {"greeting": "hi"}
    assert repr(env) == repr(unwrap(env))
    async with env:
        observation, _ = await env.reset()
    assert observation[0].text == "hey"


async def test_fork_children_keep_the_turn_count_and_the_order(made: Registry) -> None:
    env = made.make(ENV, max_turns=3)
    await env.reset()
    await env.step("a")
    left, right = await env.fork(2)
    assert isinstance(left, IgnoresLimits) and unwrap(left) is not unwrap(right)
    assert not (await left.step("b")).truncated
    assert (await left.step("c")).truncated  # the third turn counting the parent's
    with pytest.raises(envhub.EpisodeStateError):
        await left.step("d")
    assert not (await right.step("b")).truncated  # the sibling's episode is its own
    assert not (await env.step("b")).truncated


async def test_the_gymnasium_adapter_keeps_the_limit(made: Registry) -> None:
    gym_env = to_gymnasium(made.make(ENV, max_turns=2))
    try:
        gym_env.reset(seed=0)
        truncations = [gym_env.step("a")[3] for _ in range(2)]
        assert truncations == [False, True]
    finally:
        gym_env.close()


class Chatter(Policy):
    """Talks on well past the limit, then says "stop", so a limit that is not kept fails rather than hangs."""

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        return "more" if len(messages) < 20 else "stop"


async def test_a_rollout_of_such_an_env_ends_truncated_at_max_turns() -> None:
    registry.register(ENV, IgnoresLimits, override=True)
    try:
        result = await rollout(ENV, Chatter(), episodes=1, env_kwargs={"max_turns": 3})
    finally:
        registry._registrations.pop(ENV)
    [episode] = result.episodes
    assert episode.error is None and episode.truncated and not episode.terminated
    assert len(episode.turns) == 3


async def test_a_made_env_pickles_and_copies_with_its_wrappers(made: Registry) -> None:
    env = made.make(ENV, max_turns=1, greeting="hi")
    for copied in (pickle.loads(pickle.dumps(env)), copy.deepcopy(env)):
        assert isinstance(copied, IgnoresLimits) and unwrap(copied) is not unwrap(env)
        await copied.reset()
        assert (await copied.step("a")).truncated


class AnswersTools(envhub.Env):
    """An env on the contract alone that draws entropy the tape keeps and answers tool calls itself: it
    neither marks turns nor records anything, so whatever the tape holds of it is `make()`'s doing."""

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        tapes.token_hex(4)
        return [user("call a tool")], {"seed": seed}

    async def step(self, action: Action) -> StepResult:
        tapes.token_hex(4)
        assert isinstance(action, Message)
        replies = [tool_result(call.id, f"ran {call.name}", name=call.name) for call in action.tool_calls]
        return StepResult(replies, 0.0, False, False, {})


async def test_a_made_env_keeps_the_tapes_turns_and_tool_answers() -> None:
    local = Registry(discover_plugins=False)
    local.register("tests/answers-tools-v0", AnswersTools)
    env = local.make("tests/answers-tools-v0")
    calls = [ToolCall(id="a", name="look", arguments="{}"), ToolCall(id="b", name="jump", arguments="{}")]
    with tapes.using(tapes.Tape("record")) as tape:
        await env.reset(seed=0)
        await env.step(Message(role="assistant", content="", tool_calls=calls))
        await env.step(Message(role="assistant", content="done"))
    kept = [(call.turn, call.scope, call.kind, call.method) for call in tape.calls]
    assert kept == [
        (0, "env", "entropy", "token_bytes"),
        (1, "env", "entropy", "token_bytes"),
        (1, "tool 0", "tool", "look"),
        (1, "tool 1", "tool", "jump"),
        (2, "env", "entropy", "token_bytes"),
    ]
    assert tape.calls[2].output == "ran look"


async def test_recording_an_env_make_did_not_wrap_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not made by envhub\.make\(\).*Recorder"):
        await run_episode(AnswersTools(), ScriptedPolicy(["done"]), record=True)
