"""`verifiers:MODULE` against the real verifiers package, on environments written in its own v1 format
(tests/data/verifiers_envs): rewards as verifiers scores them, tools over MCP, multi-turn `Env.run`,
stops, truncation, error kinds and stored rollouts.

verifiers pins versions that envhub's e2b extra cannot share a venv with, so these run in a venv of their
own (`.venv-verifiers`); they carry the `verifiers` mark, which the main run leaves out.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import envhub
from envhub.core import Action, EpisodeStateError
from envhub.messages import Message, ToolCall, assistant
from envhub.policies import Policy
from envhub.rollout import rollout
from envhub.store import read_episodes
from envhub.tools import ToolSpec

pytestmark = pytest.mark.verifiers  # `make test-verifiers` runs these in the venv that has verifiers

ENVS = Path(__file__).parents[2] / "data" / "verifiers_envs"
PROBLEMS = [(2, 3), (17, 25), (120, 99), (7, 8)]  # vf_envhub_math's rows, in order


@pytest.fixture(autouse=True)
def verifiers_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test envs importable by name, which is how verifiers finds an environment."""
    for package in ("vf_envhub_math", "vf_envhub_calc", "vf_envhub_guess"):
        monkeypatch.syspath_prepend(str(ENVS / package))


async def verifiers_score(env: Any, seed: int, reply: str) -> tuple[float, dict[str, float]]:
    """What verifiers itself scores `reply` to the task of `seed`: the reply committed to a fresh trace
    through its message graph, then the task's own `score`."""
    import time

    import verifiers.v1 as vf
    from verifiers.v1 import graph

    task = env.task(seed)
    trace = vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
    )
    prompt = [vf.SystemMessage(content=task.data.system_prompt), vf.UserMessage(content=task.data.prompt)]
    response = vf.Response(
        id="r",
        created=int(time.time()),
        model="m",
        message=vf.AssistantMessage(content=reply),
        finish_reason="stop",
    )
    graph.prepare_turn(trace, prompt).commit(response)
    await task.score(trace)
    return trace.reward, {name: r.score for name, r in trace.rewards.items() if r is not None}


@pytest.mark.parametrize("seed", range(len(PROBLEMS)))
async def test_oracle_answer_earns_what_verifiers_scores(seed: int) -> None:
    env = envhub.make("verifiers:vf_envhub_math")
    observation, info = await env.reset(seed=seed)
    a, b = PROBLEMS[seed]
    assert [m.role for m in observation] == ["system", "user"]
    assert observation[1].text == f"What is {a} + {b}?"
    assert info["task"] == seed
    reply = f"So the sum is \\boxed{{{a + b}}}."
    result = await env.step(reply)
    expected, components = await verifiers_score(env, seed, reply)
    assert result.terminated and not result.truncated
    assert result.reward == expected == 1.5  # correct (weight 1) + boxed (weight 0.5)
    assert result.info["reward_components"] == components == {"correct": 1.0, "boxed": 1.0}
    assert result.info["metrics"] == {"reply_length": float(len(reply))}


async def test_wrong_answer_earns_nothing() -> None:
    env = envhub.make("verifiers:vf_envhub_math")
    await env.reset(seed=1)
    result = await env.step("I think it is 41.")
    assert result.terminated
    assert result.reward == 0.0 == (await verifiers_score(env, 1, "I think it is 41."))[0]
    assert result.info["reward_components"] == {"correct": 0.0, "boxed": 0.0}


async def test_seed_wraps_and_taskset_options_pass_through() -> None:
    env = envhub.make("verifiers:vf_envhub_math", limit=2)
    observation, info = await env.reset(seed=3)  # two rows: seed 3 plays row 1
    assert info["task"] == 1
    assert observation[-1].text == "What is 17 + 25?"


async def test_tools_run_on_the_tasks_toolset() -> None:
    env = envhub.make("verifiers:vf_envhub_calc")
    _, info = await env.reset(seed=0)
    names = [tool.name for tool in env.tools]
    assert names == info["tools"] == ["calculator_multiply", "calculator_shutdown"]
    multiply = env.tools[0]
    assert multiply.description == "Multiply two integers."
    assert multiply.parameters["required"] == ["x", "y"]
    call = ToolCall.create("calculator_multiply", {"x": 123, "y": 456}, id="c1")
    result = await env.step(assistant("", [call]))
    assert not result.terminated
    assert [(m.role, m.tool_call_id, m.text) for m in result.observation] == [("tool", "c1", "56088")]
    result = await env.step("56088")
    assert result.terminated
    assert result.info["reward_components"] == {"correct": 1.0, "used_tool": 1.0}
    assert result.reward == 1.25


async def test_bad_tool_arguments_are_answered_to_the_agent() -> None:
    env = envhub.make("verifiers:vf_envhub_calc")
    await env.reset(seed=1)
    bad = ToolCall(id="c1", name="calculator_multiply", arguments='{"x": "many", "y": 2}')
    result = await env.step(assistant("", [bad]))
    assert not result.terminated
    assert result.observation[0].role == "tool"
    assert "error" in result.observation[0].text.lower()
    unknown = await env.step(assistant("", [ToolCall.create("rm_rf", {}, id="c2")]))
    assert unknown.observation[0].text == "error: unknown tool 'rm_rf'"
    result = await env.step(assistant("", [ToolCall(id="c3", name="calculator_multiply", arguments="{x")]))
    assert "invalid JSON" in result.observation[0].text
    final = await env.step(str(37 * 41))
    assert final.terminated and final.info["reward_components"]["correct"] == 1.0


async def test_stop_hook_ends_the_episode() -> None:
    env = envhub.make("verifiers:vf_envhub_calc")
    await env.reset(seed=0)
    result = await env.step(assistant("", [ToolCall.create("calculator_shutdown", {}, id="c1")]))
    assert result.terminated and not result.truncated
    assert result.info["stop_condition"] == "forbidden"
    assert result.reward == 0.0


async def test_multi_turn_env_plays_the_user() -> None:
    env = envhub.make("verifiers:vf_envhub_guess")
    observation, _ = await env.reset(seed=0)  # the secret is 7
    assert observation[-1].text.startswith("Guess my number")
    replies = [(await env.step(guess)) for guess in ("10", "five", "3")]
    assert [r.observation[0].text for r in replies] == ["lower", "Reply with a number only.", "higher"]
    assert not any(r.terminated for r in replies)
    final = await env.step("7")
    assert final.terminated
    assert final.info["reward_components"] == {"solved": 1.0, "efficiency": 0.25}
    assert final.reward == pytest.approx(1.0 + 0.5 * 0.25)


async def test_out_of_turns_truncates_and_still_scores() -> None:
    env = envhub.make("verifiers:vf_envhub_guess", max_turns=2)
    await env.reset(seed=0)
    first = await env.step("1")
    assert not first.truncated
    second = await env.step("2")
    assert second.truncated and not second.terminated
    assert second.info["stop_condition"] == "max_turns"
    assert second.info["reward_components"] == {"solved": 0.0, "efficiency": 0.0}
    with pytest.raises(EpisodeStateError):
        await env.step("3")


async def test_malformed_action_is_answered_not_raised() -> None:
    env = envhub.make("verifiers:vf_envhub_math")
    await env.reset(seed=0)
    result = await env.step("   ")
    assert not result.terminated
    assert result.info["error"]["kind"] == "malformed_action"
    assert (await env.step("\\boxed{5}")).reward == 1.5


async def test_step_before_reset_is_a_driver_error() -> None:
    env = envhub.make("verifiers:vf_envhub_math")
    with pytest.raises(EpisodeStateError):
        await env.step("\\boxed{5}")


def test_unknown_module_names_what_verifiers_tried() -> None:
    with pytest.raises(ModuleNotFoundError, match="no_such_vf_env"):
        envhub.make("verifiers:no_such_vf_env")


def test_judge_without_key_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVHUB_TEST_JUDGE_KEY", raising=False)
    judge = {"id": "reference", "base_url": "http://127.0.0.1:9/v1", "api_key_var": "ENVHUB_TEST_JUDGE_KEY"}
    with pytest.raises(ValueError, match=r"\$ENVHUB_TEST_JUDGE_KEY is not set"):
        envhub.make("verifiers:vf_envhub_math", task={"judges": [judge]})


def test_env_with_a_model_of_its_own_is_refused() -> None:
    from verifiers.v1.envs.user_sim.env import UserSimEnv

    from envhub.integrations.verifiers.env import _check_in_scope

    with pytest.raises(NotImplementedError, match="model of its own"):
        _check_in_scope(UserSimEnv.__new__(UserSimEnv))


def test_import_envhub_does_not_import_verifiers() -> None:
    code = "import sys, envhub, envhub.integrations.verifiers; print('verifiers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class SumPolicy(Policy):
    """Answers vf_envhub_math's sums correctly, boxed."""

    name = "sum"

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        a, b = map(int, re.findall(r"\d+", messages[-1].text))
        return f"\\boxed{{{a + b}}}"


async def test_rollout_stores_episodes(tmp_path: Path) -> None:
    result = await rollout("verifiers:vf_envhub_math", SumPolicy(), episodes=4, out=tmp_path / "batch")
    stored = list(read_episodes(tmp_path / "batch"))
    assert len(stored) == len(result.episodes) == 4
    assert all(e.error is None for e in stored)
    assert [e.reward for e in stored] == [1.5] * 4
    assert {e.env_id for e in stored} == {"verifiers:vf_envhub_math"}
