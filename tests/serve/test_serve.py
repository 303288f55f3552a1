"""`envhub serve` and remote envs, against a real uvicorn server the test starts on port 0 (no mocks).

The server runs in its own process, as users run it; a small env that crashes on request is
registered there so that a server-side failure can be asked for.
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

import envhub
from envhub.policies import OraclePolicy
from envhub.serve.client import RemoteAccessDenied, RemoteEnv, UnknownRemoteEnv
from envhub.serve.protocol import Error, Open, server_frame
from envhub.store.reader import read_episodes
from tests.envhub_testkit.processes import interrupt

TOKEN = "s3cret"

LAUNCHER = textwrap.dedent(
    """
    import os
    import sys
    import time
    import envhub

    class Crashy(envhub.MultiTurnEnv):
        '''Answers 'ok', except to 'crash', where its machinery fails (a grader service went away).'''

        def setup(self, rng):
            return "say anything"

        def respond(self, text):
            if text.strip() == "crash":
                raise RuntimeError("the grader service went away")
            return "ok"

        @envhub.reward
        def said(self) -> float:
            return 0.0

    class Stalls(envhub.MultiTurnEnv):
        '''One turn, solved by 'done'; from seed 4 on it never answers while ENVHUB_TEST_STALL is set,
        so a test can kill the server with episodes in flight.'''

        def setup(self, rng):
            return "say done"

        def respond(self, text):
            if self.seed >= 4 and os.environ.get("ENVHUB_TEST_STALL"):
                time.sleep(3600)
            return envhub.Reply(text="ok", done=True)

        @envhub.reward
        def said_done(self) -> float:
            return 1.0

        def reference_action(self, messages):
            return "done"

    envhub.register("crashy-v0", Crashy)
    envhub.register("stalls-v0", Stalls)
    from envhub.cli import app
    app(["serve", "crashy-v0", "stalls-v0", "guess-number", "arithmetic", *sys.argv[1:]])
    """
)


class Server:
    """`envhub serve` in a child process, on a free loopback port (or the `--port` in `args`)."""

    def __init__(
        self, *args: str, env: dict[str, str] | None = None, preexec: Callable[[], None] | None = None
    ) -> None:
        self.errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (closed by stop())
        command = [sys.executable, "-c", LAUNCHER, "--port", "0", *args]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            env={**os.environ, **(env or {})},
            preexec_fn=preexec,
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        line = self.process.stdout.readline() if ready else ""
        if "ws://" not in line:
            self.stop()
            self.errors.seek(0)
            raise RuntimeError(f"envhub serve did not start: {line!r} {self.errors.read()[-2000:]}")
        self.base = line.split()[-1]  # "serving ... on ws://127.0.0.1:PORT"
        self.http = self.base.replace("ws://", "http://")

    def stop(self) -> None:
        interrupt(self.process)
        self.errors.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server("--token", TOKEN)
    yield running
    running.stop()


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVHUB_SERVE_TOKEN", TOKEN)


def metrics(server: Server) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return httpx.get(f"{server.http}/metrics", headers=headers).json()  # type: ignore[no-any-return]


async def play_oracle(env: envhub.Env, seed: int) -> list[envhub.StepResult]:
    observation, _ = await env.reset(seed=seed)
    messages, results = list(observation), []
    oracle = OraclePolicy(env)
    while True:
        action = await oracle.act(messages, env.tools)
        result = await env.step(action)
        results.append(result)
        messages += [envhub.Message(role="assistant", content=str(action)), *result.observation]
        if result.terminated or result.truncated:
            return results


@pytest.mark.usefixtures("token")
async def test_a_session_plays_an_episode_like_the_local_env(server: Server) -> None:
    """Spec (with provenance saying remote), tools, reset, the oracle's steps and rewards: as local."""
    remote = envhub.make(f"{server.base}/guess-number")
    local = envhub.make("guess-number")
    async with remote, local:
        remote_results = await play_oracle(remote, seed=7)
        local_results = await play_oracle(local, seed=7)
    assert remote_results == local_results
    assert remote_results[-1].reward == 1.0
    assert remote.spec is not None and local.spec is not None
    assert remote.spec.id == f"{server.base}/guess-number-v0"
    assert remote.spec.provenance.entry_point == (
        f"remote {server.base}/guess-number-v0 ({local.spec.provenance.entry_point})"
    )
    assert remote.spec.provenance.package == local.spec.provenance.package
    served = envhub.spec(f"{server.http}/guess-number")  # http:// maps to ws://
    assert (served.id, served.version, served.provenance) == (remote.spec.id, 0, remote.spec.provenance)


@pytest.mark.usefixtures("token")
async def test_tools_come_with_the_session_and_agent_mistakes_stay_observations(server: Server) -> None:
    remote, local = envhub.make(f"{server.base}/arithmetic"), envhub.make("arithmetic")
    bad_call = {"content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "nope", "arguments": "{"}}]}  # fmt: skip
    async with remote, local:
        assert await remote.reset(seed=1) == await local.reset(seed=1)
        assert remote.tools == local.tools and remote.tools
        assert await remote.step(bad_call) == await local.step(bad_call)  # an error observation


@pytest.mark.usefixtures("token")
async def test_a_server_side_crash_is_an_infrastructure_error(server: Server) -> None:
    async with envhub.make(f"{server.base}/crashy") as env:
        await env.reset(seed=0)
        assert (await env.step("hello")).observation[0].text == "ok"
        with pytest.raises(envhub.InfrastructureError, match="the grader service went away"):
            await env.step("crash")


@pytest.mark.usefixtures("token")
async def test_stepping_before_reset_is_an_episode_state_error(server: Server) -> None:
    async with envhub.make(f"{server.base}/guess-number") as env:
        with pytest.raises(envhub.EpisodeStateError):
            await env.step("50")


async def test_a_wrong_or_missing_token_is_refused(server: Server) -> None:
    """Both doors: the spec over HTTP (what make() reads) and a session over the websocket."""
    for token in ("wrong", ""):
        with pytest.raises(RemoteAccessDenied, match="token"):
            RemoteEnv(f"{server.base}/guess-number", token=token)
    assert httpx.get(f"{server.http}/guess-number").status_code == 401  # noqa: ASYNC210
    headers = {"Authorization": "Bearer wrong"}
    with pytest.raises(InvalidStatus) as refused:  # on the upgrade: no frame is ever read
        await connect(f"{server.base}/guess-number-v0", additional_headers=headers)
    assert refused.value.response.status_code == 401
    refusal = Error.model_validate_json(refused.value.response.body or b"")
    assert refusal.kind == "auth" and "?token=TOKEN" in refusal.message
    assert metrics(server)["refused_auth"] >= 1


@pytest.mark.usefixtures("token")
async def test_an_id_the_server_does_not_serve_is_refused(server: Server) -> None:
    with pytest.raises(UnknownRemoteEnv, match="does not serve 'countdown'"):
        envhub.make(f"{server.base}/countdown")


def test_health_and_metrics(server: Server) -> None:
    health = httpx.get(f"{server.http}/health").json()
    assert health["status"] == "ok"
    assert health["envs"] == ["arithmetic-v0", "crashy-v0", "guess-number-v0", "stalls-v0"]
    assert {"sessions_active", "max_sessions", "uptime_seconds"} <= set(metrics(server))


async def test_a_full_server_refuses_the_next_session_as_infrastructure() -> None:
    """Backpressure: with --max-sessions 2, the third concurrent episode is refused, and a slot freed
    by an ended episode is taken again."""
    server = Server("--max-sessions", "2")
    try:
        first, second, third = (RemoteEnv(f"{server.base}/guess-number") for _ in range(3))
        await first.reset(seed=0)
        await second.reset(seed=1)
        with pytest.raises(envhub.InfrastructureError, match=r"busy: the server is full \(2 sessions\)"):
            await third.reset(seed=2)
        await first.close()
        await third.reset(seed=2)  # the closed session's slot
        await second.close()
        await third.close()
        assert metrics(server)["refused_busy"] == 1
    finally:
        server.stop()


async def test_an_idle_session_is_reaped_after_its_lease() -> None:
    server = Server("--lease", "0.5")
    try:
        env = RemoteEnv(f"{server.base}/guess-number")
        await env.reset(seed=0)
        while metrics(server)["sessions_active"]:  # noqa: ASYNC110  (the pytest timeout bounds it)
            await asyncio.sleep(0.1)
        assert metrics(server)["sessions_reaped"] == 1
        with pytest.raises(envhub.InfrastructureError):
            await env.step("50")
    finally:
        server.stop()


async def test_a_server_killed_mid_episode_is_an_infrastructure_error() -> None:
    server = Server()
    env = RemoteEnv(f"{server.base}/guess-number")
    try:
        await env.reset(seed=0)
        server.process.kill()
        server.process.wait()
        with pytest.raises(envhub.InfrastructureError, match="dropped"):
            await env.step("50")
        with pytest.raises(envhub.InfrastructureError, match="could not connect"):
            await env.reset(seed=0)
    finally:
        server.stop()


def untimed(episode: dict[str, Any]) -> dict[str, Any]:
    """The episode without the policy's wall time per turn, which no two runs share."""
    for turn in episode["turns"]:
        turn["info"].pop("policy_seconds")
    return episode


def rollout(env_id: str, out: Path, *extra: str, episodes: int = 6) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "envhub", "rollout", env_id, "--policy", "oracle", "-n", str(episodes)]
    env = {**os.environ, "ENVHUB_SERVE_TOKEN": TOKEN}
    return subprocess.run(
        [*command, "--out", str(out), *extra], capture_output=True, text=True, env=env, timeout=240
    )


def test_a_remote_rollout_stores_the_local_episodes_but_for_provenance(
    server: Server, tmp_path: Path
) -> None:
    """`envhub rollout ws://...`: same seeds, same option, oracle policy → the same stored turns and
    rewards (the option is checked by the server, not against a local constructor)."""
    local_run = rollout("guess-number", tmp_path / "local", "--kwarg", "high=50")
    remote_run = rollout(f"{server.base}/guess-number", tmp_path / "remote", "--kwarg", "high=50")
    assert local_run.returncode == 0, local_run.stderr
    assert remote_run.returncode == 0, remote_run.stderr
    local, remote = read_episodes(tmp_path / "local"), read_episodes(tmp_path / "remote")
    assert len(local) == len(remote) == 6
    same = {"episode_id", "seed", "tools", "prompt", "turns", "reward", "reward_components", "terminated",
            "truncated", "error", "attempts", "env_version"}  # fmt: skip
    for mine, theirs in zip(local, remote, strict=True):
        assert untimed(mine.model_dump(include=same)) == untimed(theirs.model_dump(include=same))
        assert theirs.env_id == f"{server.base}/guess-number-v0"
        assert theirs.provenance.entry_point is not None
        assert theirs.provenance.entry_point.startswith("remote ws://")
    assert all(e.reward == 1.0 for e in remote)


def test_a_server_killed_mid_batch_leaves_errors_that_a_resume_plays_again(tmp_path: Path) -> None:
    """Episodes in flight when the server dies, and those after, are stored as infrastructure errors;
    `--resume --retry-errors` against the restarted server plays exactly those: none lost, none twice."""
    out = tmp_path / "batch"
    server = Server(env={"ENVHUB_TEST_STALL": "1"})
    port = server.base.rsplit(":", 1)[1]
    url = f"{server.base}/stalls"
    command = [sys.executable, "-m", "envhub", "rollout", url, "--policy", "oracle", "-n", "8"]
    batch = subprocess.Popen(
        [*command, "--concurrency", "2", "--retries", "0", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Seeds 0-3 finish; 4 and 5 stall on the server. The pytest timeout bounds this wait.
        while not (metrics(server).get("episodes", 0) >= 6 and metrics(server)["sessions_active"] == 2):
            time.sleep(0.1)
        server.process.kill()
        batch.wait(timeout=120)
    finally:
        server.stop()
        if batch.poll() is None:
            batch.kill()
    first = read_episodes(out)
    assert [int(e.episode_id) for e in first if e.error is None] == [0, 1, 2, 3]
    assert sorted(int(e.episode_id) for e in first if e.error is not None) == [4, 5, 6, 7]
    assert {e.error.kind for e in first if e.error is not None} == {"env_error"}
    assert any("dropped" in e.error.message for e in first if e.error is not None)

    restarted = Server("--port", port)
    try:
        again = rollout(url, out, "--resume", "--retry-errors", episodes=8)
    finally:
        restarted.stop()
    assert again.returncode == 0, again.stderr
    stored = read_episodes(out)
    assert sorted(int(e.episode_id) for e in stored) == list(range(8))  # none lost, none twice
    assert all(e.error is None and e.reward == 1.0 for e in stored)


def test_metrics_shows_every_documented_field_zeros_included() -> None:
    """docs/integrations.md's list of /metrics fields is what a fresh server shows, every counter at 0."""
    docs = (Path(__file__).parents[2] / "docs" / "integrations.md").read_text()
    section = docs.split("- `GET /metrics`")[1].split("\n## ")[0]
    counters = re.findall(r"^\| `(\w+)` \|", section, re.MULTILINE)
    fields = re.findall(r"`(\w+)`", section.split("\n\n")[0])
    assert len(counters) >= 11 and {"sessions_active", "mean_step_seconds"} <= set(fields)
    server = Server()
    try:
        shown = httpx.get(f"{server.http}/metrics").json()
    finally:
        server.stop()
    assert {name: shown.get(name) for name in counters} == dict.fromkeys(counters, 0)
    assert set(shown) == set(fields) | set(counters)


async def test_the_token_may_ride_in_the_url_for_clients_that_cannot_set_a_header(server: Server) -> None:
    """`?token=` and a URL's user info (Basic auth) are read on the upgrade, as the header is."""
    assert httpx.get(f"{server.http}/guess-number?token={TOKEN}").status_code == 200  # noqa: ASYNC210
    address = server.base.removeprefix("ws://")
    for url in (
        f"{server.base}/guess-number-v0?token={TOKEN}",
        f"ws://envhub:{TOKEN}@{address}/guess-number-v0",
    ):
        async with connect(url) as socket:
            await socket.send(Open().model_dump_json())
            hello = server_frame.validate_json(await socket.recv())
            assert hello.type == "hello", hello
