"""`envhub serve` speaking OpenEnv's protocol, driven by openenv-core's own client (`GenericEnvClient`,
what TRL's OpenEnv integration and OpenEnv's typed clients build on) against a real server process.
"""

from __future__ import annotations

import asyncio
import json
import re
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openenv.core import GenericEnvClient  # type: ignore[import-untyped]
from openenv.core.env_server.mcp_types import Tool  # type: ignore[import-untyped]
from openenv.core.env_server.types import (  # type: ignore[import-untyped]
    EnvironmentMetadata,
    HealthResponse,
    ResetResponse,
    SchemaResponse,
    State,
)
from openenv.core.harness import StepEnvSessionAdapter  # type: ignore[import-untyped]
from websockets.exceptions import ConnectionClosed

import envhub
from envhub.core import parse_action, recorded_action
from envhub.integrations.openenv.env import TOKEN_ENV
from envhub.policies import OraclePolicy
from tests.envhub_testkit.processes import interrupt
from tests.serve.test_serve import TOKEN, Server


class EnvhubServe:
    """`envhub serve IDS ARGS` on a free loopback port, its OpenEnv base URLs at hand."""

    def __init__(self, *args: str) -> None:
        command = [sys.executable, "-m", "envhub", "serve", *args, "--port", "0"]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        line = self.process.stdout.readline() if ready else ""
        if "ws://" not in line:
            self.stop()
            raise RuntimeError(f"envhub serve did not start: {line!r}")
        self.http = line.split()[-1].replace("ws://", "http://")

    def stop(self) -> None:
        interrupt(self.process)


def openenv_url(server: Server, env_id: str, *, token: str | None = TOKEN) -> str:
    """The base URL an OpenEnv client is given: the token as user info, which it sends as Basic auth."""
    credentials = f"envhub:{token}@" if token is not None else ""
    return f"http://{credentials}{server.http.removeprefix('http://')}/openenv/{env_id}"


@pytest.fixture(scope="module")
def served() -> Iterator[Server]:
    """guess-number, arithmetic (tools), crashy (fails on 'crash') and stalls, behind a token."""
    server = Server("--token", TOKEN)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def single() -> Iterator[EnvhubServe]:
    """One id served, so OpenEnv's root paths are its; one session at a time."""
    server = EnvhubServe("guess-number", "--max-sessions", "1")
    yield server
    server.stop()


def as_openenv(action: envhub.Action) -> dict[str, Any]:
    """The `EnvhubAction` an OpenEnv client sends for an action played in-process."""
    if isinstance(action, str):
        return {"message": action}
    message = parse_action(action)
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls]
    return {"message": message.text, "tool_calls": calls}


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize(("env_id", "seed"), [("guess-number", 7), ("arithmetic", 1)])
async def test_openenvs_client_plays_an_envhub_env_as_it_plays_in_process(
    served: Server, env_id: str, seed: int
) -> None:
    """Same seed, same actions (the oracle's: numbers as text, or calculator tool calls) → the same
    observations, rewards, info and end, step by step; the tools come with the reset."""
    local = envhub.make(env_id)
    oracle = OraclePolicy(local)
    async with GenericEnvClient(base_url=openenv_url(served, env_id)) as client, local:
        observation, info = await local.reset(seed=seed)
        remote = await client.reset(seed=seed)
        assert remote.observation["messages"] == [m.to_openai() for m in observation]
        assert remote.observation["info"] == jsonable(info)
        assert remote.observation["tools"] == [t.to_openai() for t in local.tools]
        assert (remote.reward, remote.done) == (None, False)
        messages = list(observation)
        while True:
            action = await oracle.act(messages, local.tools)
            result = await local.step(action)
            remote = await client.step(as_openenv(action))
            assert remote.observation["messages"] == [m.to_openai() for m in result.observation]
            assert remote.observation["info"] == jsonable(result.info)
            assert remote.reward == result.reward
            assert remote.done == (result.terminated or result.truncated)
            assert remote.observation["truncated"] == result.truncated
            messages += [recorded_action(action), *result.observation]
            if remote.done:
                break
        assert result.reward == 1.0
        state = await client.state()
    assert State.model_validate(state).step_count == len([m for m in messages if m.role == "assistant"])
    assert (state["env_id"], state["seed"], state["done"]) == (f"{env_id}-v0", seed, True)


def test_the_sync_client_finds_the_only_served_env_at_the_root(single: EnvhubServe) -> None:
    with GenericEnvClient(base_url=single.http).sync() as client:
        first = client.reset(seed=3)
        assert first.observation["text"].startswith("I am thinking of an integer")
        result = client.step({"message": "50"})
        assert result.observation["text"] in ("higher", "lower", "correct")
        assert client.state()["step_count"] == 1


async def test_a_refused_action_is_openenvs_validation_error_and_the_session_goes_on(served: Server) -> None:
    async with GenericEnvClient(base_url=openenv_url(served, "guess-number")) as client:
        with pytest.raises(RuntimeError, match=r"step\(\) called with no episode running.*EXECUTION_ERROR"):
            await client.step({"message": "50"})
        await client.reset(seed=0)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            await client.step({"guess": 50})
        empty = await client.step({"message": ""})  # readable, but no answer: the env says so, as ever
        assert empty.observation["text"].startswith("Error: ") and empty.observation["info"]["turn"] == 1
        assert (await client.step({"message": "50"})).observation["info"]["turn"] == 2


async def test_an_env_failing_on_the_server_is_an_execution_error(served: Server) -> None:
    async with GenericEnvClient(base_url=openenv_url(served, "crashy")) as client:
        await client.reset(seed=0)
        assert (await client.step({"message": "hello"})).observation["text"] == "ok"
        with pytest.raises(RuntimeError, match=r"the grader service went away.*EXECUTION_ERROR"):
            await client.step({"message": "crash"})


async def test_a_wrong_or_missing_token_is_refused_saying_so(served: Server) -> None:
    for token in ("wrong", None):
        async with GenericEnvClient(base_url=openenv_url(served, "guess-number", token=token)) as client:
            with pytest.raises(RuntimeError, match="the server needs a token"):
                await client.reset(seed=0)
    response = httpx.get(f"{served.http}/openenv/guess-number/schema")  # noqa: ASYNC210
    assert response.status_code == 401
    metrics = httpx.get(f"{served.http}/metrics").json()  # noqa: ASYNC210
    assert metrics["refused_auth"] >= 2


async def test_a_full_server_refuses_the_next_session_with_capacity_reached(single: EnvhubServe) -> None:
    async with (
        GenericEnvClient(base_url=single.http) as first,
        GenericEnvClient(base_url=single.http) as second,
    ):
        await first.reset(seed=0)
        with pytest.raises(RuntimeError, match=r"the server is full.*CAPACITY_REACHED"):
            await second.reset(seed=0)


async def test_envhub_and_openenv_sessions_hold_the_same_slots(single: EnvhubServe) -> None:
    """One session class under both protocols: an envhub session holds the one slot against an OpenEnv
    client (refused with CAPACITY_REACHED and max_sessions), and an OpenEnv session against envhub's
    client (refused as busy), and each slot is free again once its session ends."""
    remote = envhub.make(f"{single.http.replace('http://', 'ws://')}/guess-number")
    await remote.reset(seed=0)
    try:
        async with GenericEnvClient(base_url=single.http) as client:
            with pytest.raises(RuntimeError, match=r"the server is full.*CAPACITY_REACHED"):
                await client.reset(seed=0)
    finally:
        await remote.close()
    async with httpx.AsyncClient() as http:  # the server frees the slot once it has read the close frame
        for _ in range(100):
            if (await http.get(f"{single.http}/health")).json()["sessions"] == 0:
                break
            await asyncio.sleep(0.05)
    async with GenericEnvClient(base_url=single.http) as client:
        await client.reset(seed=0)
        with pytest.raises(envhub.InfrastructureError, match="the server is full"):
            await envhub.make(f"{single.http.replace('http://', 'ws://')}/guess-number").reset(seed=0)


async def test_an_idle_session_is_reaped_after_its_lease() -> None:
    server = EnvhubServe("guess-number", "--lease", "0.5")
    try:
        async with GenericEnvClient(base_url=server.http) as client:
            await client.reset(seed=0)
            while httpx.get(f"{server.http}/metrics").json()["sessions_active"]:  # noqa: ASYNC110, ASYNC210
                await asyncio.sleep(0.1)  # the pytest timeout bounds this wait
            assert httpx.get(f"{server.http}/metrics").json()["sessions_reaped"] == 1  # noqa: ASYNC210
            with pytest.raises((ConnectionClosed, RuntimeError)):
                await client.step({"message": "50"})
    finally:
        server.stop()


def test_the_http_endpoints_answer_in_openenv_cores_own_models(served: Server) -> None:
    base = f"{served.http}/openenv/guess-number"
    auth = ("envhub", TOKEN)
    schema = SchemaResponse.model_validate(httpx.get(f"{base}/schema", auth=auth).json())
    assert set(schema.action["properties"]) == {"message", "tool_calls", "metadata"}
    reset = ResetResponse.model_validate(httpx.post(f"{base}/reset", json={"seed": 7}, auth=auth).json())
    assert reset.observation["info"]["seed"] == 7 and reset.done is False
    assert HealthResponse.model_validate(httpx.get(f"{base}/health").json()).status == "healthy"
    metadata = EnvironmentMetadata.model_validate(httpx.get(f"{base}/metadata", auth=auth).json())
    assert metadata.name == "guess-number-v0"
    assert State.model_validate(httpx.get(f"{base}/state", auth=auth).json()).step_count == 0
    bad = httpx.post(f"{base}/step", json={"action": {"guess": 5}}, auth=auth)
    assert bad.status_code == 422
    stateless = httpx.post(f"{base}/step", json={"action": {"message": "50"}}, auth=auth)
    assert stateless.status_code == 409 and "/ws" in stateless.json()["detail"]
    assert httpx.get(f"{served.http}/openenv/countdown/schema", auth=auth).status_code == 404


async def test_the_openenv_format_plays_an_envhub_served_env_like_the_local_one(
    served: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both directions at once: `openenv:` on `envhub serve`'s OpenEnv endpoint, the token from the
    environment, the served env's chat messages taken as they are."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    remote = envhub.make(f"openenv:{served.http}/openenv/guess-number")
    local = envhub.make("guess-number")
    async with remote, local:
        observation, _ = await remote.reset(seed=5)
        assert observation == (await local.reset(seed=5))[0]
        low, high = 1, 100
        while True:
            guess = str((low + high) // 2)
            mine, theirs = await remote.step(guess), await local.step(guess)
            assert mine.observation == theirs.observation
            assert (mine.reward, mine.terminated) == (theirs.reward, theirs.terminated)
            if theirs.terminated or theirs.truncated:
                break
            higher = theirs.observation[0].text == "higher"
            low, high = (int(guess) + 1, high) if higher else (low, int(guess) - 1)
    assert mine.reward == 1.0


def test_openenvs_harness_session_plays_an_envhub_env(served: Server) -> None:
    """The session TRL's OpenEnv harness drives (openenv-core's `StepEnvSessionAdapter` over a step/reset/
    state client) plays guess-number through a `guess` tool; its reward is the in-process episode's."""
    guess_tool = Tool(name="guess", description="Guess the number.", input_schema={
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})  # fmt: skip
    session = StepEnvSessionAdapter(
        GenericEnvClient(base_url=openenv_url(served, "guess-number")),
        seed=11,
        tool_specs=[guess_tool],
        action_builder=lambda name, arguments: {"message": str(arguments["n"])},
        initial_messages_builder=lambda result, task: result.observation["messages"],
    )
    local = envhub.make("guess-number")
    try:
        prompt, _ = asyncio.run(local.reset(seed=11))
        assert session.initial_messages() == [m.to_openai() for m in prompt]
        low, high = 1, 100
        while True:
            n = (low + high) // 2
            called = session.call_tool("guess", {"n": n})
            mine = asyncio.run(local.step(str(n)))
            assert called.data["observation"]["messages"] == [m.to_openai() for m in mine.observation]
            if called.done:
                break
            low, high = (n + 1, high) if mine.observation[0].text == "higher" else (low, n - 1)
        verdict = session.verify(transcript=[])
        assert verdict.env_reward == mine.reward == 1.0 and verdict.done
    finally:
        session.close()


async def test_a_wrong_token_gets_advice_that_openenvs_client_can_follow(served: Server) -> None:
    """The refusal names the base URL to give the client, the token as its user info; given so, it plays."""
    for token in ("wrong", None):
        async with GenericEnvClient(base_url=openenv_url(served, "guess-number", token=token)) as client:
            with pytest.raises(RuntimeError, match=r"the server needs a token.*SESSION_ERROR") as refused:
                await client.reset(seed=0)
    advised = re.search(r"base_url='([^']+)'", str(refused.value))
    assert advised is not None, str(refused.value)
    async with GenericEnvClient(base_url=advised[1].replace("TOKEN", TOKEN)) as client:
        assert (await client.reset(seed=0)).observation["text"].startswith("I am thinking of an integer")


async def test_the_root_of_a_server_of_several_ids_lists_them_to_an_openenv_client(served: Server) -> None:
    served_ids = ["arithmetic-v0", "crashy-v0", "guess-number-v0", "stalls-v0"]
    async with GenericEnvClient(base_url=served.http) as client:
        with pytest.raises(RuntimeError, match=r"serves several envs.*SESSION_ERROR") as refused:
            await client.reset(seed=0)
    bases = [f"{served.http}/openenv/{env_id}" for env_id in served_ids]
    assert all(base in str(refused.value) for base in bases), str(refused.value)
    schema = httpx.get(f"{served.http}/schema")  # noqa: ASYNC210
    assert schema.status_code == 404 and schema.json()["envs"] == served_ids
    with_token = bases[2].replace("http://", f"http://envhub:{TOKEN}@")  # the listed base, as advised
    async with GenericEnvClient(base_url=with_token) as client:
        assert (await client.reset(seed=0)).observation["text"].startswith("I am thinking of an integer")


async def test_an_id_the_server_does_not_serve_is_refused_in_openenvs_format(served: Server) -> None:
    async with GenericEnvClient(base_url=openenv_url(served, "countdown")) as client:
        with pytest.raises(RuntimeError, match=r"does not serve 'countdown'.*SESSION_ERROR") as refused:
            await client.reset(seed=0)
    assert f"{served.http}/openenv/guess-number-v0" in str(refused.value)


def test_a_rollout_of_an_openenv_url_plays_within_the_servers_sessions(
    single: EnvhubServe, tmp_path: Path
) -> None:
    """`envhub serve --max-sessions 1`: the default concurrency (8) would have 7 episodes refused as
    CAPACITY_REACHED; the rollout reads the server's capacity from /health and plays one at a time."""
    command = [sys.executable, "-m", "envhub", "rollout", f"openenv:{single.http}", "--policy", "random"]
    result = subprocess.run(
        [*command, "--episodes", "4", "--out", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the server allows 1 sessions; playing 1 at a time" in result.stdout
    assert "errors" not in result.stdout or "│ errors              │             0 │" in result.stdout
