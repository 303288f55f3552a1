"""desktop-v0 on real parts: Xvfb, openbox, Mousepad, LibreOffice Calc and xterm in a real bubblewrap
sandbox, driven by xdotool. Oracles reach 1.0 through the GUI, random play does not, the desktop's own
terminal is as contained as any sandboxed command, and pyautogui strings drive the real apps."""

from __future__ import annotations

import asyncio
import io
import json
import socket
from pathlib import Path

import pytest
from envhub_desktop.actions import Click, Drag, Keys, TypeText, Wait
from envhub_desktop.desktop import Desktop, desktop_policy
from envhub_desktop.env import DesktopEnv
from envhub_desktop.tasks import FAMILIES, TASKS
from PIL import Image

import envhub.sandbox as sandbox
from envhub.checks import acheck
from envhub.core import NotForkable
from envhub.messages import Message, ToolCall
from envhub.policies import OraclePolicy
from envhub.policies.random import RandomPolicy
from envhub.rollout import rollout, run_episode

pytestmark = pytest.mark.timeout(600)


def call(name: str, **arguments: object) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, dict(arguments), id=f"call_{name}")])


async def play_oracle(env: DesktopEnv, seed: int) -> float:
    return (await run_episode(env, OraclePolicy(), seed=seed)).reward


TWO_SEEDS_ELSEWHERE = {task.name for family in ("terminal", "writer") for task in FAMILIES[family]}
"""Families whose own test files play every oracle on two seeds; the rest get their second seed here."""


@pytest.mark.parametrize("task", sorted(set(TASKS) - TWO_SEEDS_ELSEWHERE))
async def test_the_oracle_solves_each_task_through_the_gui(task: str) -> None:
    env = DesktopEnv(task=task, spare=False)
    try:
        assert await play_oracle(env, seed=3) == 1.0
        assert env.reset_info()["task"] == task
    finally:
        await env.close()


async def test_random_play_scores_near_zero() -> None:
    """Random tool calls (random coordinates, keys, text) never save the asked-for file."""
    for task in ("editor-append-line", "calc-add-row"):
        played = await rollout(
            "desktop",
            RandomPolicy(seed=1),
            episodes=2,
            env_kwargs={"task": task, "spare": False, "max_turns": 6},
        )
        assert [e.error for e in played.episodes] == [None, None]
        assert [e.reward for e in played.episodes] == [0.0, 0.0]


async def test_envhub_check_passes() -> None:
    """The arrival check as `envhub check desktop` runs it: determinism, oracle, random, store."""
    report = await acheck("desktop", seeds=2, episodes=2, env_kwargs={"task": "editor-delete-line"})
    assert report.passed, [(r.name, r.detail) for r in report.failures]


async def test_observations_are_png_screenshots_of_the_chosen_size_and_a_window_list() -> None:
    env = DesktopEnv(task="editor-append-line", width=800, height=600, spare=False)
    try:
        messages, _ = await env.reset(seed=0)
        first = messages[-1]
        assert "Task: " in first.text and "notes.txt - Mousepad" in first.text
        (image,) = first.images
        picture = Image.open(io.BytesIO(image.data))
        assert (picture.format, picture.size) == ("PNG", (800, 600))
        colours = picture.convert("L").getcolors(maxcolors=256)
        assert colours is not None and len(colours) > 8  # the editor is drawn, not a blank screen
    finally:
        await env.close()


async def test_a_pyautogui_string_drives_the_real_editor() -> None:
    env = DesktopEnv(task="editor-append-line", spare=False)
    try:
        await env.reset(seed=5)
        assert env.episode is not None
        line = env.episode.goal.split("`")[1]
        code = f"import pyautogui\npyautogui.hotkey('ctrl', 'end')\npyautogui.typewrite({line!r})\n"
        code += "pyautogui.press('enter')\npyautogui.hotkey('ctrl', 's')\nimport time\ntime.sleep(0.5)"
        result = await env.step(call("pyautogui", code=code))
        assert not result.terminated and "Error" not in result.observation[0].text
        result = await env.step(call("pyautogui", code="DONE"))
        assert result.terminated and result.reward == 1.0
    finally:
        await env.close()


async def test_a_refused_pyautogui_string_is_answered_to_the_agent_and_does_nothing() -> None:
    env = DesktopEnv(task="editor-append-line", spare=False)
    try:
        await env.reset(seed=0)
        result = await env.step(call("pyautogui", code="pyautogui.click(1, 1)\nimport os\nos.system('id')"))
        assert "Error" in result.observation[0].text and "import os" in result.observation[0].text
        assert not result.terminated
        result = await env.step(call("click", x=5000, y=5))
        assert "outside the 1280x800 screen" in result.observation[0].text
    finally:
        await env.close()


async def test_an_episode_refuses_to_fork() -> None:
    env = DesktopEnv(task="editor-append-line", spare=False)
    try:
        await env.reset(seed=0)
        with pytest.raises(NotForkable, match="cannot fork"):
            await env.fork()
    finally:
        await env.close()


async def test_a_spare_desktop_serves_the_next_reset_and_nothing_of_the_last_episode_is_in_it() -> None:
    """The spare is a different sandbox (LibreOffice's prepared profile copied in ahead), and the oracle
    still reaches 1.0 on it."""
    env = DesktopEnv(task="calc-add-row")
    try:
        await env.reset(seed=0)
        first = env.desktop
        assert first is not None
        await first.sb.write_file("/tmp/left-behind", "secret of episode 1")
        assert await play_oracle(env, seed=1) == 1.0
        assert env.reset_info()["spare"] is True and env.desktop is not first
        assert first.sandbox is not None and first.sandbox.closed
        assert env.desktop is not None
        with pytest.raises(FileNotFoundError):
            await env.desktop.sb.read_file("/tmp/left-behind")
    finally:
        await env.close()
    assert env._next is None


@pytest.mark.timeout(60)  # 8 clicks at one point took 105 s with `--sync`; about 1 s without
async def test_pointer_actions_select_text_in_the_real_editor() -> None:
    """Double-click selects a word, a drag selects a line, clicking twice at one point does not stall
    (`mousemove --sync` to the pointer's own place once waited 15 s a click). Points are where Debian's
    Mousepad, centred by openbox on a 1280x800 screen, draws the two seeded lines."""
    desktop = await Desktop().start()
    try:
        await desktop.sb.write_file("t.txt", "hello world\nsecond line\n")
        await desktop.launch(["mousepad", "/work/t.txt"], window="t.txt")
        for _ in range(8):
            await desktop.act(Click(600, 500))  # empty space below the text: the caret goes to the end
        for action in (
            Wait(0.5),  # past GTK's double-click time, or the next click would count as one more of these
            Click(400, 204, count=2),
            TypeText("there"),
            Drag(422, 222, from_x=323, from_y=222),
            TypeText("x"),
            Keys(("ctrl", "s")),
            Wait(0.5),
        ):
            await desktop.act(action)
        assert await desktop.sb.read_file("t.txt") == b"hello there\nx\n"
    finally:
        await desktop.close()


async def test_another_sandbox_cannot_reach_the_desktops_display() -> None:
    """The X server's sockets are the sandbox's own (its /tmp, its network namespace): a second sandbox
    with the same policy and DISPLAY finds no display, while the desktop's own commands do."""
    desktop = await Desktop().start()
    try:
        own = await desktop.sb.exec(["xdpyinfo"])
        assert own.exit_code == 0 and "dimensions:    1280x800" in own.stdout
        async with sandbox.open("local", policy=desktop_policy(), spare=False) as other:
            probe = await other.exec(["xdpyinfo", "-display", ":0"])
            assert probe.exit_code != 0 and "unable to open display" in probe.stderr
    finally:
        await desktop.close()


PROBE = """
import json, os, socket, sys
out = {}
def attempt(name, fn):
    try:
        out[name] = "reached: " + repr(fn())[:80]
    except Exception as exc:
        out[name] = "blocked: " + type(exc).__name__
def connect(host, port):
    s = socket.create_connection((host, port), timeout=3)
    s.sendall(b"hello from the desktop")
    return "connected"
attempt("host_loopback", lambda: connect("127.0.0.1", int(sys.argv[1])))
attempt("outside", lambda: connect("1.1.1.1", 53))
attempt("host_file", lambda: open(sys.argv[2]).read())
attempt("shadow", lambda: open("/etc/shadow").read())
attempt("root_home", lambda: os.listdir("/root"))
json.dump(out, open("/work/probe.json", "w"))
"""


async def test_the_desktops_own_terminal_reaches_no_network_and_no_host_file(tmp_path: Path) -> None:
    """An agent that opens a terminal on its desktop types commands as the sandbox's uid, in its
    namespaces: the host's loopback service, the outside and the host's files are out of reach."""
    secret = tmp_path / "host-secret.txt"
    secret.write_text("the host's secret")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    desktop = await Desktop(width=1024, height=768).start()
    try:
        await desktop.sb.write_file("probe.py", PROBE)
        await desktop.launch(["xterm"], window="xterm")
        for action in (
            TypeText(f"python3 /work/probe.py {port} {secret} > /work/probe.log 2>&1\n"),
            Wait(0.5),
        ):
            await desktop.act(action)
        for _ in range(100):
            try:
                found = json.loads(await desktop.sb.read_file("probe.json"))
                break
            except (FileNotFoundError, json.JSONDecodeError):
                await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"the probe did not run: {await desktop.sb.read_file('probe.log')!r}")
        assert set(found) == {"host_loopback", "outside", "host_file", "shadow", "root_home"}
        assert all(value.startswith("blocked") for value in found.values()), found
        with pytest.raises(BlockingIOError):
            server.accept()  # nothing from the desktop ever reached the host's listener
        await desktop.act(Keys(("ctrl", "d")))  # the terminal closes; the desktop is unharmed
    finally:
        server.close()
        await desktop.close()
    assert desktop.sandbox is not None and desktop.sandbox.closed
