# ruff: noqa: ASYNC221, ASYNC240 - host-side checks are deliberately direct and synchronous
"""Hostile agents on the desktop: the sandbox hostile-code suite under the desktop's policy, and attacks
typed into the desktop's own terminal as an agent would type them.

The suite (`tests/sandbox/test_hostile.py`) is not copied: its test functions are collected here as well,
with this module's `sb` and `backend` fixtures and its policies made desktop ones (`desktop_flavoured`):
every IsolationPolicy a case builds gets the desktop's read-only /etc binds and environment, with the
case's own limits; a case that asks for no policy gets `desktop_policy()` itself. A case added to the
suite runs here too. The cases run on both backends the desktop runs on: local (bubblewrap) and docker
(the desktop's image).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from envhub_desktop.actions import TypeText
from envhub_desktop.desktop import DESKTOP_ETC, DESKTOP_IMAGE, Desktop, desktop_policy
from envhub_desktop.env import TerminalDesktopEnv
from envhub_desktop.tasks import Saved

import envhub.sandbox as sandbox
from envhub.messages import Message, ToolCall
from envhub.policies import OraclePolicy
from envhub.rollout import run_episode
from envhub.sandbox import IsolationPolicy, Sandbox
from tests.envhub_testkit.leaks import sandbox_footprint
from tests.sandbox import test_hostile as suite

pytestmark = pytest.mark.timeout(300)


def desktop_flavoured(**limits: Any) -> IsolationPolicy:
    """The desktop's policy with a case's own settings on top (the suite's fork bomb asks for pids=32 to
    see the limit bite quickly); the desktop's binds and environment are kept, merged with the case's."""
    base = desktop_policy()
    return IsolationPolicy(
        **{
            **base.model_dump(),
            **limits,
            "ro_binds": {**base.ro_binds, **limits.get("ro_binds", {})},
            "env": {**base.env, **limits.get("env", {})},
        }
    )


async def open_desktop_sandbox(backend: str, policy: IsolationPolicy | None = None) -> Sandbox:
    """A sandbox as the desktop opens one on `backend`: on docker, its image, and none of the host /etc
    binds (the image has its own configuration), as `desktop_policy(backend="docker")` has none."""
    policy = policy or desktop_policy()
    if backend == "local":
        return await sandbox.open("local", policy=policy)
    host_binds = desktop_policy().ro_binds
    binds = {host: inside for host, inside in policy.ro_binds.items() if host not in host_binds}
    return await sandbox.open(
        "docker", policy=policy.model_copy(update={"ro_binds": binds}), image=DESKTOP_IMAGE
    )


@pytest.fixture(autouse=True)
def desktop_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's cases, while they run from this module, build desktop policies."""
    monkeypatch.setattr(suite, "IsolationPolicy", desktop_flavoured)
    monkeypatch.setattr(suite, "open_backend", open_desktop_sandbox)


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest) -> str:
    """Both backends the desktop runs on (docker with the desktop's image, sandboxes/desktop/build.sh)."""
    return str(request.param)


@pytest.fixture
async def sb(backend: str) -> AsyncIterator[Sandbox]:
    async with await open_desktop_sandbox(backend) as box:
        yield box


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every case here, like the suite's, leaves the host as it found it."""
    before = sandbox_footprint()
    yield
    assert sandbox_footprint() == before


CASES = sorted(name for name in vars(suite) if name.startswith("test_"))
globals().update({name: getattr(suite, name) for name in CASES})  # collected here, with the fixtures above


def test_every_hostile_case_is_collected_here_too() -> None:
    assert len(CASES) >= 20 and all(globals()[name] is getattr(suite, name) for name in CASES)


def test_the_desktop_policy_is_what_the_cases_get() -> None:
    flavoured = desktop_flavoured(pids=32, env={"X": "1"})
    assert flavoured.pids == 32 and flavoured.memory_mb == desktop_policy().memory_mb
    assert flavoured.ro_binds == desktop_policy().ro_binds and flavoured.env["DISPLAY"] == ":0"
    assert flavoured.env["X"] == "1" and not flavoured.network and flavoured.seccomp


async def test_the_desktops_etc_binds_are_read_only() -> None:
    """What the desktop's policy adds to the default (DESKTOP_ETC and the font cache, bound from the host)
    cannot be written, replaced or removed from inside."""
    binds = list(desktop_policy().ro_binds)
    assert set(binds) >= {path for path in DESKTOP_ETC if Path(path).exists()}
    before = {path: sorted(p.name for p in Path(path).iterdir()) for path in binds}
    async with sandbox.open("local", policy=desktop_policy()) as sb:
        for path in binds:
            r = await sb.exec(
                f"echo x > {path}/envhub-probe; mkdir {path}/envhub-dir; "
                f'for f in {path}/*; do rm -rf "$f" || mv "$f" "$f.moved"; break; done; echo done'
            )
            assert r.stdout.strip() == "done" and "Read-only file system" in r.stderr, r.stderr
    assert before == {path: sorted(p.name for p in Path(path).iterdir()) for path in binds}


# --- attacks typed into the desktop's own terminal --------------------------------------------------------


def call(name: str, **arguments: object) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, dict(arguments), id=f"call_{name}")])


async def solve(env: TerminalDesktopEnv, seed: int) -> float:
    """A fresh episode played by its oracle: the env is still usable."""
    return (await run_episode(env, OraclePolicy(), seed=seed)).reward


async def type_until_it_ends(env: TerminalDesktopEnv, command: str, steps: int = 10) -> tuple[str, Any]:
    """Type `command` into the terminal, then wait a second at a time until the episode ends."""
    result = await env.step(call("type_text", text=command + "\n"))
    for _ in range(steps):
        if result.terminated:
            break
        result = await env.step(call("wait", seconds=1.0))
    return " ".join(message.text for message in result.observation), result


@pytest.mark.parametrize(
    ("command", "gone"),
    [
        ("kill $(pidof Xvfb)", "the X server (Xvfb) is gone"),
        ("kill -9 $(pidof Xvfb)", "the X server (Xvfb) is gone"),
        ("kill $(pidof openbox)", "the window manager (openbox) is gone"),
    ],
    ids=["Xvfb", "Xvfb-9", "openbox"],
)
async def test_killing_the_display_or_window_manager_ends_the_episode_as_the_agents_failure(
    command: str, gone: str
) -> None:
    """Reward 0 even with the task's files right, the reason said, no exception for the runner to retry;
    the env closes the broken desktop and the next episode plays to 1.0."""
    env = TerminalDesktopEnv(task="terminal-count-lines")
    try:
        await env.reset(seed=0)
        assert env.episode is not None
        for action in env.episode.oracle:  # the task done first: the broken desktop still scores 0
            if isinstance(action, TypeText):
                await env.step(call("type_text", text=action.text))
        text, result = await type_until_it_ends(env, f"sleep 1; {command}")
        assert result.terminated and result.reward == 0.0
        assert gone in text and result.info["desktop_broken"].startswith(gone)
        assert env.desktop is not None
        written = await env.desktop.sb.read_file("/work/count.txt")
        assert env.episode.check(Saved({"/work/count.txt": written}))
        assert await solve(env, seed=1) == 1.0
    finally:
        await env.close()


async def test_a_fork_bomb_in_the_terminal_is_contained_and_the_env_resets() -> None:
    """A shell fork bomb under the desktop's pids=512: the episode ends as the agent's failure once the
    desktop cannot start programs; the host still forks, the next episode plays to 1.0."""
    env = TerminalDesktopEnv(task="terminal-sort-unique")
    try:
        await env.reset(seed=0)
        text, result = await type_until_it_ends(env, "b(){ b|b& };b", steps=20)
        assert result.terminated and result.reward == 0.0, text
        assert "process limit (pids=512)" in result.info["desktop_broken"]
        assert subprocess.run(["true"], check=False).returncode == 0
        assert await solve(env, seed=1) == 1.0
    finally:
        await env.close()


async def test_a_memory_hog_in_the_terminal_is_killed_and_the_desktop_plays_on() -> None:
    """3 GiB touched under the desktop's 2 GiB: the sandbox's OOM killer takes the hog (exit 137), not
    the X server, and the episode goes on to 1.0."""
    env = TerminalDesktopEnv(task="terminal-grep-log")
    try:
        await env.reset(seed=0)
        assert env.episode is not None and env.desktop is not None
        hog = 'python3 -c "x = b\'x\' * (3 << 30)"; echo "exit $?" > /tmp/hog.txt'
        await env.step(call("type_text", text=hog + "\n"))
        for _ in range(60):
            try:
                said = await env.desktop.sb.read_file("/tmp/hog.txt")
                break
            except FileNotFoundError:
                await env.step(call("wait", seconds=0.5))
        else:
            raise AssertionError("the hog never ended")
        assert said == b"exit 137\n"
        for action in env.episode.oracle:
            if isinstance(action, TypeText):
                await env.step(call("type_text", text=action.text))
        await env.step(call("wait", seconds=1.0))
        result = await env.step(call("done"))
        assert result.terminated and result.reward == 1.0 and "desktop_broken" not in result.info
    finally:
        await env.close()


DISPLAY_PROBE = """
import json, os, socket, subprocess, sys
out = {"x11_sockets": sorted(os.listdir("/tmp/.X11-unix"))}
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1]); out["other"] = "connected"
except OSError as exc:
    out["other"] = type(exc).__name__
shown = subprocess.run(["xdpyinfo"], capture_output=True, text=True).stdout.splitlines()
out["own"] = [line.split()[1] for line in shown if line.strip().startswith("dimensions:")]
json.dump(out, open("/work/display.json", "w"))
"""


async def test_the_terminal_cannot_reach_another_desktops_display() -> None:
    """Two desktops at once: from the first one's xterm, the second one's X socket (at its host path) is
    out of reach, and the terminal's own display is the only one it sees (the abstract X sockets live in
    each sandbox's own network namespace)."""
    mine, other = Desktop(width=800, height=600), Desktop(width=1024, height=768)
    await asyncio.gather(mine.start(), other.start())
    try:
        # The other desktop's X socket as the host sees it (its scratch /tmp is a host directory), found
        # by a marker file written into that /tmp.
        marker = f"envhub-display-probe-{uuid.uuid4().hex}"
        await other.sb.write_file(f"/tmp/{marker}", "")
        (found_marker,) = Path(tempfile.gettempdir()).glob(f"envhub-sandbox-*/tmp/{marker}")
        host_socket = found_marker.parent / ".X11-unix" / "X0"
        assert host_socket.is_socket()
        await mine.sb.write_file("probe.py", DISPLAY_PROBE)
        await mine.launch(["xterm", "-T", "Terminal"], window="^Terminal$")
        await mine.wait_still()  # as a reset does: keys typed before xterm has the focus are lost
        await mine.act(TypeText(f"python3 /work/probe.py {host_socket} > /work/probe.log 2>&1\n"))
        for _ in range(100):
            try:
                found = json.loads(await mine.sb.read_file("display.json"))
                break
            except (FileNotFoundError, json.JSONDecodeError):
                await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the probe did not run: {await mine.sb.read_file('probe.log')!r}")
        assert found == {"x11_sockets": ["X0"], "other": "FileNotFoundError", "own": ["800x600"]}
        assert (await other.sb.exec(["xdpyinfo"])).exit_code == 0  # the other display is unharmed
    finally:
        await asyncio.gather(mine.close(), other.close())
