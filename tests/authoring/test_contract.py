"""The Env contract as the authoring bases keep it: turns, errors, truncation, rewards, the event loop."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

import envhub
from envhub.messages import Message, ToolCall


def no_running_loop() -> bool:
    """True on a worker thread; False if called on the event loop, which sync env code must never be."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


class Calculator(envhub.ToolEnv):
    max_turns = 4

    def __init__(self) -> None:
        super().__init__()
        self.off_loop: list[bool] = []
        self.barrier = asyncio.Barrier(2)

    def setup(self, rng: random.Random) -> str:
        self.off_loop.append(no_running_loop())
        self.x = rng.randint(0, 1000)
        return f"Double {self.x}."

    @envhub.tool
    def double(self, n: int) -> int:
        """Double a number."""
        self.off_loop.append(no_running_loop())
        return 2 * n

    @envhub.tool
    async def wait_for_partner(self) -> str:
        """Returns only once another call is in flight at the same time."""
        async with asyncio.timeout(5):
            await self.barrier.wait()
        return "together"

    @envhub.tool
    def explode(self) -> str:
        """Always fails."""
        raise RuntimeError("boom")

    @envhub.reward
    def correct(self, answer: str) -> float:
        self.off_loop.append(no_running_loop())
        return float(answer.strip() == str(2 * self.x))

    @envhub.reward(weight=0.5)
    def short(self, messages: list[Message]) -> float:
        return float(len(messages) <= 4)


def call(name: str, arguments: str = "{}", id: str = "c") -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=id, name=name, arguments=arguments)])


async def test_tool_episode_terminates_with_weighted_reward_components() -> None:
    env = Calculator()
    observation, info = await env.reset(seed=5)
    assert info["tools"] == ["double", "wait_for_partner", "explode"]
    assert observation[0].text == f"Double {env.x}."
    obs, reward, terminated, truncated, _ = await env.step(call("double", json.dumps({"n": env.x})))
    assert obs[0].text == str(2 * env.x) and obs[0].tool_call_id == "c"
    assert (reward, terminated, truncated) == (0.0, False, False)
    result = await env.step(obs[0].text)
    assert result.terminated and not result.truncated
    assert result.info["reward_components"] == {"correct": 1.0, "short": 1.0}
    assert result.reward == 1.5


async def test_an_instances_reward_weights_override_the_decorators() -> None:
    env = Calculator()
    env.reward_weights = {"correct": 0.0, "short": 2.0}  # what a constructor option would choose
    await env.reset(seed=5)
    result = await env.step(str(2 * env.x))
    assert result.info["reward_components"] == {"correct": 1.0, "short": 1.0} and result.reward == 2.0
    env.reward_weights = {"corect": 1.0}
    await env.reset(seed=5)
    with pytest.raises(ValueError, match=r"reward_weights names \['corect'\], which are not rewards"):
        await env.step("0")


@pytest.mark.parametrize(
    ("action", "error"),
    [
        (call("double", '{"n": '), "arguments are not valid JSON"),
        (
            call("triple", '{"n": 1}'),
            "unknown tool 'triple'; available tools: double, explode, wait_for_partner",
        ),
        (call("double", '{"n": "seven"}'), "n: Input should be a valid integer"),
        (call("double", "{}"), "n: Field required"),
        (call("explode"), "explode failed: RuntimeError: boom"),
    ],
)
async def test_bad_tool_calls_become_error_observations_and_count_as_turns(
    action: Message, error: str
) -> None:
    env = Calculator()
    await env.reset(seed=0)
    result = await env.step(action)
    assert result.observation[0].role == "tool"
    assert result.observation[0].text.startswith("Error: ") and error in result.observation[0].text
    assert result.info["error"]["kind"] == "tool_error"
    assert result.info["turn"] == 1 and not (result.terminated or result.truncated)


@pytest.mark.parametrize(
    ("action", "error"),
    [
        ("", "the message is empty"),
        ("   ", "the message is empty"),
        ({"content": None}, "the message is empty"),
        ({"role": "user", "content": "hi"}, "the action must be an assistant message, got role 'user'"),
        ({"tool_calls": "not a list"}, "the message could not be read"),
        (42, "an action must be a message, a string or a dict, not int"),
    ],
)
async def test_malformed_actions_never_raise(action: object, error: str) -> None:
    env = Calculator()
    await env.reset(seed=0)
    result = await env.step(action)  # type: ignore[arg-type]
    assert result.observation[0].role == "user" and error in result.observation[0].text
    assert result.info["error"]["kind"] == "malformed_action"
    assert result.info["turn"] == 1


async def test_turn_limit_truncates_and_still_scores() -> None:
    env = Calculator()
    await env.reset(seed=0)
    results = [await env.step("") for _ in range(4)]
    assert [r.truncated for r in results] == [False, False, False, True]
    assert not results[-1].terminated
    assert results[-1].info["reward_components"] == {"correct": 0.0, "short": 0.0}


async def test_parallel_tool_calls_run_concurrently_and_answer_in_order() -> None:
    env = Calculator()
    await env.reset(seed=0)
    both = Message(
        role="assistant",
        tool_calls=[ToolCall(id="a", name="wait_for_partner"), ToolCall(id="b", name="wait_for_partner")],
    )
    result = await env.step(both)
    assert [(m.tool_call_id, m.text) for m in result.observation] == [("a", "together"), ("b", "together")]


async def test_sync_setup_tools_and_rewards_run_off_the_event_loop() -> None:
    env = Calculator()
    await env.reset(seed=0)
    await env.step(call("double", '{"n": 2}'))
    await env.step("4")
    assert env.off_loop == [True, True, True]


async def test_step_outside_an_episode_is_a_driver_bug() -> None:
    env = Calculator()
    with pytest.raises(envhub.EpisodeStateError, match="call reset\\(\\) first"):
        await env.step("hi")
    await env.reset(seed=0)
    await env.step("done")
    with pytest.raises(envhub.EpisodeStateError):
        await env.step("again")


async def test_same_seed_same_episode_and_unseeded_resets_differ() -> None:
    env = Calculator()
    first, info = await env.reset(seed=11)
    again, _ = await env.reset(seed=11)
    assert first == again and info["seed"] == 11
    drawn = {(await env.reset())[0][0].text for _ in range(8)}
    assert len(drawn) > 1


async def test_unseeded_resets_after_a_seed_are_reproducible() -> None:
    """Like gymnasium: seed once, and the following unseeded resets repeat too."""
    a, b = Calculator(), Calculator()
    texts = []
    for env in (a, b):
        await env.reset(seed=3)
        texts.append([(await env.reset())[1]["seed"] for _ in range(3)])
    assert texts[0] == texts[1]


class Guess(envhub.MultiTurnEnv):
    max_turns = 3

    def setup(self, rng: random.Random) -> str:
        self.secret = rng.randint(1, 9)
        return "Guess 1-9."

    def respond(self, text: str) -> str | envhub.Reply:
        if text.strip() == str(self.secret):
            return envhub.Reply(text="yes", done=True, reward=0.25)
        return "no"

    @envhub.reward
    def won(self, answer: str) -> float:
        return float(answer.strip() == str(self.secret))


async def test_multi_turn_reply_rewards_add_to_final_reward() -> None:
    env = Guess()
    await env.reset(seed=1)
    wrong = await env.step(str(env.secret % 9 + 1))
    assert (wrong.observation[0].text, wrong.reward, wrong.terminated) == ("no", 0.0, False)
    right = await env.step(str(env.secret))
    assert right.terminated and right.reward == 1.25
    assert right.observation[0].text == "yes"


class Echo(envhub.SingleTurnEnv):
    system_prompt = "Be brief."

    def setup(self, rng: random.Random) -> str:
        return "Say hi."

    @envhub.reward
    def said_hi(self, answer: str) -> float:
        return float("hi" in answer.lower())


async def test_single_turn_ends_after_one_answer_even_when_malformed() -> None:
    env = Echo()
    observation, _ = await env.reset()
    assert [m.role for m in observation] == ["system", "user"]
    good = await env.step("Hi!")
    assert good.terminated and good.reward == 1.0
    await env.reset()
    bad = await env.step("")
    assert bad.truncated and not bad.terminated and bad.reward == 0.0


async def test_async_context_manager_closes() -> None:
    closed = []

    class Closing(Echo):
        async def close(self) -> None:
            closed.append(True)

    async with Closing() as env:
        await env.reset()
    assert closed == [True]


def test_reward_with_unknown_parameter_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match=r"reward 'bad' asks for \['score'\]; reward methods may only take"):

        class Bad(Echo):
            @envhub.reward
            def bad(self, score: float) -> float:
                return score


def test_a_tool_named_like_the_loops_own_attribute_is_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"Shadow.answer is a tool.*@envhub.tool\(name='answer'\)"):

        class Shadow(Calculator):
            @envhub.tool
            def answer(self, text: str) -> str:  # type: ignore[override]
                """Submit the final answer."""
                return text


def test_a_tool_may_take_a_reserved_name_under_another_method_name() -> None:
    class Submit(Calculator):
        @envhub.tool(name="answer")
        def submit(self, text: str) -> str:
            """Submit the final answer."""
            return text

    env = Submit()
    assert "answer" in [t.name for t in env.tools]
    assert env.answer == ""  # still the final answer's text, which the rewards grade


def test_answer_overridden_by_a_plain_method_is_refused() -> None:
    with pytest.raises(TypeError, match="answer must stay a property"):

        class Method(Calculator):
            def answer(self) -> str:  # type: ignore[override]
                return "42"


async def test_async_setup_and_respond_are_awaited_on_the_loop() -> None:
    class AsyncGuess(envhub.MultiTurnEnv):
        async def setup(self, rng: random.Random) -> str:
            await asyncio.sleep(0)
            self.secret = rng.randint(1, 3)
            return "Guess 1-3."

        async def respond(self, text: str) -> str | envhub.Reply:
            await asyncio.sleep(0)
            return envhub.Reply(text="yes", done=True) if text == str(self.secret) else "no"

    env = AsyncGuess()
    observation, _ = await env.reset(seed=0)
    assert observation[0].text == "Guess 1-3."
    result = await env.step(str(env.secret))
    assert result.terminated and result.observation[0].text == "yes"


async def test_overriding_a_reward_without_the_mark_removes_it() -> None:
    class Unscored(Echo):
        def said_hi(self, answer: str) -> float:
            return 5.0

    env = Unscored()
    await env.reset()
    result = await env.step("hi")
    assert result.info["reward_components"] == {} and result.reward == 0.0


async def test_malformed_action_is_kept_in_history_for_rewards() -> None:
    env = Calculator()
    await env.reset(seed=0)
    await env.step({"tool_calls": "not a list"})
    assert env.messages[-2].role == "assistant" and "not a list" in env.messages[-2].text
