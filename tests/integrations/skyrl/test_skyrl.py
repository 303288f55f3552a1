"""envhub.integrations.skyrl through SkyRL-Gym's own registry and text-env interface (`make`, `init`,
`step`, `get_metrics`, `close`), against the same env played by envhub in-process."""

from __future__ import annotations

import json

import pytest
import skyrl_gym  # type: ignore[import-untyped]
from skyrl_gym.envs.base_text_env import BaseTextEnv  # type: ignore[import-untyped]

import envhub
from envhub.integrations import skyrl as envhub_skyrl
from envhub.messages import Message
from envhub.sync_loop import run
from envhub.text_format import render

ENV = "arithmetic-v0"
SEED = 11

envhub_skyrl.register(ENV, steps=2)


def reference_texts(seed: int) -> list[str]:
    """The reference solution's turns for `seed`, written as model text (`<tool_call>` blocks)."""
    env = envhub.make(ENV, steps=2)
    messages = list(run(env.reset(seed=seed))[0])
    texts = []
    while True:
        action = env.reference_action(messages)
        assert action is not None
        message = action if isinstance(action, Message) else Message(role="assistant", content=str(action))
        texts.append(render([message]))
        result = run(env.step(render([message])))
        messages += [message, *result.observation]
        if result.terminated or result.truncated:
            return texts


@pytest.mark.parametrize("wrong", [False, True], ids=["reference", "wrong-answer"])
def test_steps_through_skyrl_equal_envhub_in_process(wrong: bool) -> None:
    """Same seed, same model text: SkyRL-Gym's env gives envhub's rewards, `done` and tool results, and
    its first prompt is envhub's task with the tool schemas in the system prompt."""
    texts = reference_texts(SEED)
    if wrong:
        texts[-1] = str(int(texts[-1]) + 1)
    env = skyrl_gym.make(ENV, env_config={}, extras={"seed": SEED})
    direct = envhub.make(ENV, steps=2)
    assert isinstance(env, BaseTextEnv) and env.spec.id == ENV
    prompt, info = env.init([])
    observation, direct_info = run(direct.reset(seed=SEED))
    assert info == direct_info and prompt[-1] == {"role": "user", "content": observation[-1].text}
    assert prompt[0]["role"] == "system" and observation[0].text in prompt[0]["content"]
    assert all(json.dumps(tool.to_openai()) in prompt[0]["content"] for tool in direct.tools)
    for text in texts:
        out = env.step(text)
        result = run(direct.step(text))
        assert (out["reward"], out["done"]) == (result.reward, result.terminated or result.truncated)
        tools = [m.text for m in result.observation if m.role == "tool"]
        assert [f"<tool_response>\n{t}\n</tool_response>" for t in tools] == [
            o["content"] for o in out["observations"]
        ]
        assert all(o["role"] == "user" for o in out["observations"])
    assert out["done"] and out["reward"] == (0.0 if wrong else 1.0)
    assert env.get_metrics() == out["metadata"]["reward_components"]
    env.close()


def test_extras_max_turns_truncates_as_envhub_does() -> None:
    """SkyRL's per-sample `max_turns` extra is envhub's turn limit: one tool call ends the episode."""
    env = skyrl_gym.make(ENV, env_config={}, extras={"seed": SEED, "max_turns": 1})
    env.init([])
    out = env.step(reference_texts(SEED)[0])
    assert env.max_turns == 1 and out["done"] and out["metadata"]["turn"] == 1
    env.close()


def test_register_is_idempotent_and_a_clash_is_refused() -> None:
    """The same registration again changes nothing; another env under a taken name is SkyRL's error,
    and the spec stays JSON (SkyRL ships specs to other processes)."""
    envhub_skyrl.register(ENV, steps=2)
    with pytest.raises(skyrl_gym.error.RegistrationError):
        envhub_skyrl.register(ENV, steps=3)
    assert json.loads(skyrl_gym.spec(ENV).to_json())["kwargs"] == {"env_id": ENV, "make_kwargs": {"steps": 2}}


def test_an_env_that_sends_an_image_is_refused_not_stripped() -> None:
    envhub_skyrl.register("vision-v0", kind="count-shapes")
    env = skyrl_gym.make("vision-v0", env_config={}, extras={"seed": 0})
    with pytest.raises(ValueError, match="SkyRL-Gym text envs carry text only"):
        env.init([])
    env.close()
