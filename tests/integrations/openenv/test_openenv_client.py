"""`envhub.make("openenv:URL")` against real OpenEnv servers: openenv-core's own echo env (rendered by
its own `openenv init`) and a guessing game written in its server-side classes (tests/data), each
served by openenv-core's app factory on uvicorn in a process of its own, as OpenEnv users serve them.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import envhub
from envhub.integrations.openenv.env import TOKEN_ENV, OpenEnvEnv, session_capacity
from envhub.messages import Message, ToolCall
from tests.envhub_testkit.processes import interrupt

DATA = Path(__file__).parents[2] / "data"


class Uvicorn:
    """`uvicorn APP --app-dir DIR` on a free loopback port, read from uvicorn's own log line (a thread
    keeps reading the log, so that a full pipe never stalls the server)."""

    def __init__(self, app: str, app_dir: Path) -> None:
        command = [sys.executable, "-m", "uvicorn", app, "--app-dir", str(app_dir), "--port", "0"]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        self.log: list[str] = []
        self.url = ""
        started = threading.Event()
        threading.Thread(target=self._read, args=(started,), daemon=True).start()
        started.wait(timeout=60)
        if not self.url:
            self.stop()
            raise RuntimeError(f"uvicorn {app} did not start: {''.join(self.log)[-2000:]}")

    def _read(self, started: threading.Event) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.log.append(line)
            if not self.url and "Uvicorn running on " in line:
                self.url = line.split("Uvicorn running on ")[1].split()[0]  # http://127.0.0.1:PORT
                started.set()
        started.set()  # the server exited before it listened

    def stop(self) -> None:
        interrupt(self.process)


@pytest.fixture(scope="module")
def guess() -> Iterator[Uvicorn]:
    server = Uvicorn("openenv_guess:app", DATA)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def echo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Uvicorn]:
    """openenv-core's example env, as `openenv init echo_env` writes it (one session at a time)."""
    root = tmp_path_factory.mktemp("openenv")
    init = subprocess.run(
        [sys.executable, "-m", "openenv.cli", "init", "echo_env"], cwd=root, capture_output=True, text=True
    )
    assert init.returncode == 0, init.stdout + init.stderr
    server = Uvicorn("echo_env.server.app:app", root)
    yield server
    server.stop()


def guess_call(n: int, call_id: str = "c1") -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create("GuessAction", {"guess": n}, id=call_id)])


async def test_an_openenv_episode_plays_under_envhubs_contract(guess: Uvicorn) -> None:
    """The action schema is the agent's one tool; observation, reward and done map directly; the seed
    reaches the server's reset; the server's state is there to read."""
    env = envhub.make(f"openenv:{guess.url}")
    assert isinstance(env, OpenEnvEnv)
    assert env.spec is not None and env.spec.id == f"openenv:{guess.url}"
    assert envhub.spec(f"openenv:{guess.url}").provenance.data_source == guess.url
    [tool] = env.tools
    assert tool.name == "GuessAction" and tool.description == "A guess at the hidden number."
    assert set(tool.parameters["properties"]) == {"guess"} and tool.parameters["required"] == ["guess"]
    target = random.Random(3).randint(1, 100)
    async with env:
        observation, info = await env.reset(seed=3)
        assert [m.text for m in observation] == ["Guess my number between 1 and 100."]
        assert info["seed"] == 3 and info["openenv"]["observation"] == {"hint": observation[0].text}
        low, high, results = 1, 100, list[envhub.StepResult]()
        while True:
            guess_ = (low + high) // 2
            result = await env.step(guess_call(guess_, call_id=f"c{len(results)}"))
            results.append(result)
            if result.terminated or result.truncated:
                break
            hint = result.observation[0]
            assert (hint.role, hint.tool_call_id, result.reward) == ("tool", f"c{len(results) - 1}", 0.0)
            low, high = (guess_ + 1, high) if hint.text == "higher" else (low, guess_ - 1)
        assert guess_ == target
        assert (result.reward, result.terminated, result.observation[0].text) == (1.0, True, "correct")
        assert result.info["openenv"]["observation"] == {"hint": "correct"}
        state = await env.state()
        assert state["step_count"] == len(results)


async def test_a_text_reply_fills_the_actions_only_text_field(echo: Uvicorn) -> None:
    """openenv-core's own echo env: `message` is its action's one text field, so plain text plays it."""
    async with envhub.make(f"openenv:{echo.url}") as env:
        assert [t.name for t in env.tools] == ["EchoAction"]
        observation, _ = await env.reset(seed=0)
        assert "ready" in observation[0].text
        result = await env.step("hello")
        assert result.info["openenv"]["observation"] == {"echoed_message": "hello", "message_length": 5}
        assert result.reward == pytest.approx(0.5)  # the echo env's reward: 0.1 per character
        assert (result.terminated, result.truncated) == (False, False)
        again = await env.step(Message(role="assistant", tool_calls=[ToolCall.create("EchoAction", {
            "message": "hi"})]))  # fmt: skip
        assert again.reward == pytest.approx(0.2) and again.observation[0].role == "tool"


async def test_an_action_the_server_refuses_is_the_agents_mistake(guess: Uvicorn) -> None:
    """Refused by the server's schema (VALIDATION_ERROR), or unreadable here: an error observation, no
    reward, the episode goes on."""
    async with envhub.make(f"openenv:{guess.url}") as env:
        await env.reset(seed=3)
        refused = await env.step(guess_call(500))
        assert refused.observation[0].role == "tool" and refused.observation[0].text.startswith(
            "Error: the environment refused the action: guess: Input should be less than or equal to 100"
        )
        assert refused.info["error"]["kind"] == "refused_action"
        assert (refused.reward, refused.terminated) == (0.0, False)
        for mistake in ("fifty", guess_call(50).model_copy(update={"tool_calls": [ToolCall.create("nope")]})):
            answered = await env.step(mistake)
            assert answered.info["error"]["kind"] == "malformed_action"
            assert answered.observation[0].text.startswith("Error: ")
        assert (await env.step('{"guess": 50}')).info["openenv"]["observation"]["hint"] in ("higher", "lower")


async def test_a_failure_on_the_server_is_an_infrastructure_error(guess: Uvicorn) -> None:
    async with envhub.make(f"openenv:{guess.url}") as env:
        await env.reset(seed=3)
        with pytest.raises(envhub.InfrastructureError, match=r"EXECUTION_ERROR.*the number store went away"):
            await env.step(guess_call(0))
        observation, _ = await env.reset(seed=4)  # a new session for the next episode
        assert observation[0].text.startswith("Guess")


async def test_a_full_server_is_an_infrastructure_error(echo: Uvicorn) -> None:
    """The echo app takes one session at a time: a second is refused with CAPACITY_REACHED."""
    async with envhub.make(f"openenv:{echo.url}") as first, envhub.make(f"openenv:{echo.url}") as second:
        await first.reset(seed=0)
        with pytest.raises(envhub.InfrastructureError, match="CAPACITY_REACHED"):
            await second.reset(seed=0)


async def test_a_dropped_connection_is_an_infrastructure_error() -> None:
    server = Uvicorn("openenv_guess:app", DATA)
    try:
        env = envhub.make(f"openenv:{server.url}")
        await env.reset(seed=1)
        server.process.kill()
        server.process.wait()
        with pytest.raises(envhub.InfrastructureError, match="dropped"):
            await env.step(guess_call(50))
        with pytest.raises(envhub.InfrastructureError, match="could not connect"):
            await env.reset(seed=1)
        with pytest.raises(envhub.InfrastructureError, match="could not reach"):
            envhub.make(f"openenv:{server.url}")
    finally:
        server.stop()


async def test_max_turns_truncates_an_episode_the_server_never_ends(echo: Uvicorn) -> None:
    async with envhub.make(f"openenv:{echo.url}", max_turns=2) as env:
        await env.reset(seed=0)
        first, second = await env.step("a"), await env.step("b")
        assert (first.truncated, second.truncated, second.terminated) == (False, True, False)
        with pytest.raises(envhub.EpisodeStateError):
            await env.step("c")


def test_a_url_that_is_no_openenv_server_is_refused_saying_so(
    echo: Uvicorn, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="looks like openenv:http://HOST:PORT"):
        envhub.make("openenv:localhost")
    with pytest.raises(ValueError, match="does not look like an OpenEnv server"):
        envhub.make(f"openenv:{echo.url}/nothing-here")
    monkeypatch.setenv(TOKEN_ENV, "s3cret")  # sent, and ignored by a server that asks for none
    assert envhub.make(f"openenv:{echo.url}").tools


def test_episodes_in_event_loops_of_their_own_each_get_a_session(guess: Uvicorn) -> None:
    """What `asyncio.run` per episode does (a sync caller): each reset opens a session in its loop."""
    env = envhub.make(f"openenv:{guess.url}")
    for seed in (1, 2):
        observation, _ = asyncio.run(env.reset(seed=seed))
        assert observation[0].text.startswith("Guess")
    with pytest.raises(envhub.InfrastructureError, match="another event loop"):
        asyncio.run(env.step(guess_call(50)))


def test_a_rollout_plays_within_an_openenv_core_servers_one_session(echo: Uvicorn, tmp_path: Path) -> None:
    """openenv-core's echo app takes one session at a time and does not say so before it refuses one:
    the rollout's default plays one episode at a time, and says why."""
    command = [sys.executable, "-m", "envhub", "rollout", f"openenv:{echo.url}", "--policy", "random"]
    command += ["--episodes", "3", "--episode-timeout", "5", "--out", str(tmp_path / "run")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr  # 1 of 3 refused would exit 1
    assert "does not say how many sessions it allows; playing 1 episode at a time" in result.stdout
    assert session_capacity(echo.url) is None
