"""The OpenAI-compatible policy against a real server process: tokens captured, faults retried or reported."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable

import pytest

import envhub
from envhub.messages import Message, user
from envhub.policies import Generation, OpenAIPolicy, PolicyServerError, TokenTrace
from envhub.rollout.runner import run_episode
from envhub.testing.openai_server import (
    OpenAIServer,
    completion_text,
    garbage,
    hang,
    message,
    prompt_text,
    status,
    text,
    tool_call,
)
from envhub.tools import ToolSpec

HELLO = [user("hello")]
Conversation = tuple[list[Message], list[ToolSpec]]


def fast_policy(server: OpenAIServer, **options: object) -> OpenAIPolicy:
    """A policy that backs off for milliseconds, not seconds, so fault tests stay fast."""
    settings: dict[str, object] = {"backoff": 0.01, "max_backoff": 0.05, "timeout": 5.0, **options}
    return OpenAIPolicy(server.base_url, "fake-model", **settings)  # type: ignore[arg-type]


async def test_plays_an_arithmetic_episode_and_records_tokens(
    server: OpenAIServer, oracle: Callable[..., Awaitable[Conversation]]
) -> None:
    conversation, _ = await oracle(3, steps=2)
    actions = [m for m in conversation if m.role == "assistant"]
    server.script(*(message(a) for a in actions))
    policy = fast_policy(server)
    async with envhub.make("arithmetic", steps=2) as env:
        episode = await run_episode(env, policy, seed=3)
    await policy.close()

    assert episode.error is None
    assert episode.reward == 1.0
    assert len(episode.turns) == len(actions) == 3
    requests = server.requests()
    assert len(requests) == 3
    previous: list[int] = []
    for turn, request in zip(episode.turns, requests, strict=True):
        sent = request["json"]
        assert sent["model"] == "fake-model"
        assert [t["function"]["name"] for t in sent["tools"]] == ["add", "subtract", "multiply"]
        assert sent["logprobs"] is True
        assert sent["return_tokens_as_token_ids"] is True
        assert sent["return_token_ids"] is True
        tokens = turn.tokens
        assert isinstance(tokens, TokenTrace)
        assert tokens.prompt_token_ids == list(prompt_text(sent["messages"]).encode())
        assert tokens.completion_token_ids == list(completion_text(turn.action.to_openai()).encode())
        assert tokens.completion_logprobs is not None
        assert len(tokens.completion_logprobs) == len(tokens.completion_token_ids)
        assert all(lp < 0 for lp in tokens.completion_logprobs)
        assert tokens.prompt_token_ids[: len(previous)] == previous
        assert tokens.sample_break is None
        previous = tokens.prompt_token_ids + tokens.completion_token_ids
    assert [t.tokens.finish_reason for t in episode.turns if t.tokens] == ["tool_calls", "tool_calls", "stop"]


async def test_drifting_prompt_tokens_record_a_sample_break(server: OpenAIServer) -> None:
    server.script(
        text("first", prompt_token_ids=[1, 2, 3], token_ids=[4, 5]),
        text("second", prompt_token_ids=[1, 2, 3, 4, 9, 6]),
    )
    policy = fast_policy(server)
    episode = policy.for_episode(envhub.make("arithmetic"))
    first, second = await episode.act(HELLO, []), await episode.act(HELLO, [])
    await policy.close()
    assert isinstance(first, Generation) and isinstance(second, Generation)
    assert first.tokens is not None and first.tokens.sample_break is None
    assert second.tokens is not None and second.tokens.sample_break is not None
    assert "turn 2" in second.tokens.sample_break
    assert "position 4 of 5" in second.tokens.sample_break


async def test_server_errors_are_retried_until_success(server: OpenAIServer) -> None:
    server.script(status(500, "boom"), status(502), status(503), text("recovered"))
    policy = fast_policy(server, max_retries=3)
    generation = await policy.act(HELLO, [])
    await policy.close()
    assert generation.message.text == "recovered"
    assert len(server.requests()) == 4


async def test_persistent_server_errors_give_a_clear_error_after_bounded_retries(
    server: OpenAIServer,
) -> None:
    server.script(default=status(500, {"error": {"message": "CUDA out of memory"}}))
    policy = fast_policy(server, max_retries=2)
    with pytest.raises(PolicyServerError) as caught:
        await policy.act(HELLO, [])
    await policy.close()
    assert len(server.requests()) == 3
    error = str(caught.value)
    assert server.base_url in error
    assert "answered 500" in error
    assert "on all 3 attempts" in error
    assert "CUDA out of memory" in error
    assert "max_retries" in error


async def test_rate_limits_honour_retry_after(server: OpenAIServer) -> None:
    server.script(status(429, "slow down", headers={"Retry-After": "1"}), text("ok"))
    policy = fast_policy(server, max_backoff=5.0)
    started = time.perf_counter()
    generation = await policy.act(HELLO, [])
    await policy.close()
    assert generation.message.text == "ok"
    assert time.perf_counter() - started >= 0.9
    assert len(server.requests()) == 2


async def test_client_errors_are_not_retried(server: OpenAIServer) -> None:
    server.script(default=status(400, {"error": {"message": "The model `fake` does not exist."}}))
    policy = fast_policy(server, max_retries=5)
    with pytest.raises(PolicyServerError, match="rejected the request with 400") as caught:
        await policy.act(HELLO, [])
    await policy.close()
    assert len(server.requests()) == 1
    assert "does not exist" in str(caught.value)
    assert "not retried" in str(caught.value)


async def test_a_garbage_body_is_a_clear_error(server: OpenAIServer) -> None:
    server.script(default=garbage("<html>Bad Gateway</html>"))
    policy = fast_policy(server)
    with pytest.raises(PolicyServerError) as caught:
        await policy.act(HELLO, [])
    await policy.close()
    error = str(caught.value)
    assert server.base_url in error
    assert "not a chat completion" in error
    assert "<html>Bad Gateway</html>" in error
    assert len(server.requests()) == 1


async def test_a_hanging_server_times_out_within_the_configured_timeout(server: OpenAIServer) -> None:
    server.script(default=hang())
    policy = fast_policy(server, timeout=0.3, max_retries=1)
    started = time.perf_counter()
    with pytest.raises(PolicyServerError) as caught:
        await policy.act(HELLO, [])
    elapsed = time.perf_counter() - started
    await policy.close()
    assert 0.55 <= elapsed < 3.0
    assert len(server.requests()) == 2
    error = str(caught.value)
    assert "did not answer within 0.3 s" in error
    assert "timeout" in error


async def test_an_unreachable_server_is_a_clear_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    policy = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff=0.01, timeout=2.0)
    with pytest.raises(PolicyServerError, match="could not be reached") as caught:
        await policy.act(HELLO, [])
    await policy.close()
    assert "is the server running" in str(caught.value)


async def test_connection_limit_queues_requests_without_timing_them_out(server: OpenAIServer) -> None:
    server.script(default={**text("slow"), "delay": 0.2})
    policy = fast_policy(server, max_connections=1, timeout=0.5, max_retries=0)
    started = time.perf_counter()
    generations = await asyncio.gather(*(policy.act(HELLO, []) for _ in range(4)))
    await policy.close()
    assert time.perf_counter() - started >= 0.75  # one at a time, and the last waited longer than the timeout
    assert [g.message.text for g in generations] == ["slow"] * 4
    assert len(server.requests()) == 4


async def test_without_logprobs_no_token_fields_are_asked_for(server: OpenAIServer) -> None:
    server.script(tool_call("add", {"a": 1, "b": 2}))
    policy = fast_policy(server, logprobs=False, api_key="sk-test", extra_body={"top_k": 5})
    generation = await policy.act(HELLO, [])
    await policy.close()
    sent = server.requests()[0]
    assert "logprobs" not in sent["json"] and "return_token_ids" not in sent["json"]
    assert sent["json"]["top_k"] == 5
    assert sent["headers"]["authorization"] == "Bearer sk-test"
    assert generation.tokens is None
    assert generation.message == Message(
        role="assistant",
        tool_calls=[generation.message.tool_calls[0]],
    )
    assert generation.message.tool_calls[0].name == "add"
    assert generation.message.tool_calls[0].arguments == '{"a": 1, "b": 2}'


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        OpenAIPolicy("localhost:8000/v1", "m")
    with pytest.raises(ValueError, match="max_retries >= 0"):
        OpenAIPolicy("http://localhost:8000/v1", "m", max_retries=-1)
