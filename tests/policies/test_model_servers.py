"""Model servers as users run them: vLLM without its tool flags, servers without vLLM's token fields.

Every test talks to a real HTTP server process that answers as those servers do (vLLM's own error text,
OpenAI's refusal of unknown fields, a server that silently drops them).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator

import pytest

import envhub
from envhub.messages import Message, user
from envhub.policies import OpenAIPolicy, PolicyServerError
from envhub.policies.openai import ToolCallingUnavailable
from envhub.rollout.runner import run_episode
from envhub.testing.openai_server import OpenAIServer, text
from envhub.tools import ToolSpec

HELLO = [user("hello")]
ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
)


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer.start() as running:
        yield running


def policy(server: OpenAIServer, **options: object) -> OpenAIPolicy:
    settings: dict[str, object] = {"backoff": 0.01, "max_backoff": 0.05, "timeout": 5.0, **options}
    return OpenAIPolicy(server.base_url, "fake-model", **settings)  # type: ignore[arg-type]


def episode_copy(player: OpenAIPolicy) -> OpenAIPolicy:
    """The policy one episode of a rollout gets (sharing the connection and server facts)."""
    copy = player.for_episode(envhub.make("arithmetic"))
    assert isinstance(copy, OpenAIPolicy)
    return copy


# ---------------------------------------------------------------- 16.1: vLLM started without tool flags


async def test_vllm_without_tool_flags_is_named_as_such(server: OpenAIServer) -> None:
    server.script(tool_flags=False)
    player = policy(server, max_retries=3)
    with pytest.raises(ToolCallingUnavailable) as caught:
        await player.act(HELLO, [ADD])
    await player.close()
    assert caught.value.missing == ["--enable-auto-tool-choice", "--tool-call-parser"]
    message = str(caught.value)
    assert "started without --enable-auto-tool-choice and --tool-call-parser" in message
    assert "tool_format='text'" in message
    assert "check the model name" not in message and "logprobs=False" not in message
    assert len(server.requests()) == 1  # a configuration error: retrying cannot help


async def test_a_required_tool_choice_names_only_the_parser_flag(server: OpenAIServer) -> None:
    server.script(tool_flags=False)
    player = policy(server, extra_body={"tool_choice": "required"})
    with pytest.raises(ToolCallingUnavailable) as caught:
        await player.act(HELLO, [ADD])
    await player.close()
    assert caught.value.missing == ["--tool-call-parser"]


async def test_the_text_tool_format_plays_a_tool_episode_on_a_server_without_tool_flags(
    server: OpenAIServer,
) -> None:
    async with envhub.make("arithmetic", steps=2) as env:
        await env.reset(seed=5)
        plan, value = env.plan, env.start  # type: ignore[attr-defined]
        written: list[str] = []
        for op, n in plan:
            # raw model text, spaced as no renderer would write it: it must come back to the model verbatim
            call = json.dumps({"name": op, "arguments": {"a": value, "b": n}}, separators=(",", ":"))
            written.append(f"Step {len(written) + 1}.<tool_call>{call}</tool_call>")
            value = {"add": value + n, "subtract": value - n, "multiply": value * n}[op]
        server.script(*(text(w) for w in written), text(str(value)), tool_flags=False)
        player = policy(server, tool_format="text")
        episode = await run_episode(env, player, seed=5)
        await player.close()

    assert episode.error is None, episode.error
    assert episode.reward == 1.0
    assert [t.action.tool_calls[0].name for t in episode.turns[:2]] == [op for op, _ in plan]
    requests = [r["json"] for r in server.requests()]
    assert len(requests) == 3
    assert all("tools" not in body for body in requests)
    prompt = requests[0]["messages"][0]
    assert prompt["role"] == "system" and prompt["content"].startswith("You are a careful assistant.")
    assert '"name": "multiply"' in prompt["content"] and "<tool_call>" in prompt["content"]
    last = requests[2]["messages"]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert [m["content"] for m in last if m["role"] == "assistant"] == written
    assert last[3]["content"].startswith("<tool_response>")
    # the model saw exactly what it wrote, so its tokens extend turn after turn
    assert all(t.tokens is not None and t.tokens.sample_break is None for t in episode.turns)


# ---------------------------------------------------------------- 16.5: sampling settings and token fields


async def test_top_p_and_settings_reach_the_server_and_the_record(server: OpenAIServer) -> None:
    server.script()
    player = policy(server, temperature=0.7, top_p=0.9, max_tokens=64, tool_format="text")
    await player.act(HELLO, [])
    await player.close()
    sent = server.requests()[0]["json"]
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"]) == (0.7, 0.9, 64)
    info = player.info()
    assert (info["top_p"], info["tool_format"], info["logprobs"]) == (0.9, "text", None)
    with pytest.raises(ValueError, match="top_p"):
        policy(server, top_p=0.0)
    with pytest.raises(ValueError, match="tool_format"):
        policy(server, tool_format="xml")


async def test_vllm_token_fields_are_kept_by_default_without_a_warning(server: OpenAIServer) -> None:
    server.script()
    player = policy(server)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        generation = await player.act(HELLO, [])
    await player.close()
    assert generation.tokens is not None and generation.tokens.completion_logprobs
    assert server.requests()[0]["json"]["return_token_ids"] is True


async def test_a_server_that_rejects_token_fields_warns_once_and_stores_text(server: OpenAIServer) -> None:
    server.script(text("first"), text("second"), token_fields="reject")
    player = policy(server)
    episodes = [episode_copy(player) for _ in range(2)]
    with pytest.warns(UserWarning, match="rejected the token-id fields") as caught:
        first = await episodes[0].act(HELLO, [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second episode neither warns nor asks again
        second = await episodes[1].act(HELLO, [])
    await player.close()
    assert len(caught) == 1 and "text only" in str(caught[0].message)
    assert (first.message.text, second.message.text) == ("first", "second")
    assert first.tokens is None and second.tokens is None
    asked = [("return_token_ids" in r["json"], "logprobs" in r["json"]) for r in server.requests()]
    assert asked == [(True, True), (False, False), (False, False)]


async def test_a_server_that_ignores_token_fields_warns_once_and_stops_asking(server: OpenAIServer) -> None:
    server.script(token_fields="ignore")
    player = policy(server)
    with pytest.warns(UserWarning, match="ignored the token-id fields"):
        first = await player.act(HELLO, [])
    second = await player.act(HELLO, [])
    await player.close()
    assert first.message.text == second.message.text == "ok"
    assert first.tokens is None and second.tokens is None
    assert ["return_token_ids" in r["json"] for r in server.requests()] == [True, False]


async def test_logprobs_true_refuses_a_server_without_token_fields(server: OpenAIServer) -> None:
    server.script(token_fields="ignore")
    player = policy(server, logprobs=True)
    with pytest.raises(PolicyServerError, match="ignored the token-id fields"):
        await player.act(HELLO, [])
    server.script(token_fields="reject")
    with pytest.raises(PolicyServerError, match="rejected the request with 400") as caught:
        await player.act(HELLO, [])
    await player.close()
    assert "return_tokens_as_token_ids" in str(caught.value)


async def test_text_format_reads_tool_calls_and_keeps_plain_answers(server: OpenAIServer) -> None:
    server.script(
        text('Adding. <tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'),
        text("The answer is 3."),
    )
    player = policy(server, tool_format="text")
    call = await player.act(HELLO, [ADD])
    answer = await player.act(HELLO, [ADD])
    await player.close()
    assert call.message.text == "Adding."
    assert [(c.name, json.loads(c.arguments)) for c in call.message.tool_calls] == [("add", {"a": 1, "b": 2})]
    assert answer.message == Message(role="assistant", content="The answer is 3.")
