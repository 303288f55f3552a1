"""The desktop on the docker backend: the same session (Xvfb, openbox, the apps) in a container of
envhub/desktop:bookworm (sandboxes/desktop/build.sh) on the real Docker engine. A sample of tasks (one
editor, one spreadsheet) reaches 1.0 through the GUI there, and the desktop's own terminal reaches no
network and no host file."""

from __future__ import annotations

import asyncio
import io
import json
import socket
from pathlib import Path

import pytest
from envhub_desktop.actions import Keys, TypeText, Wait
from envhub_desktop.desktop import DESKTOP_IMAGE, Desktop, desktop_policy
from envhub_desktop.env import CalcDesktopEnv, DesktopEnv, EditorDesktopEnv
from PIL import Image
from test_desktop import PROBE, play_oracle  # the local tests' probe and oracle player

import envhub
from envhub.registration import sandbox_kind
from envhub.sandbox import SandboxUnavailable

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize(
    ("env_class", "task", "seed"),
    [(EditorDesktopEnv, "editor-replace-word", 1), (CalcDesktopEnv, "calc-total", 2)],
    ids=["editor", "calc"],
)
async def test_the_oracle_solves_a_sample_of_tasks_on_docker(
    env_class: type[DesktopEnv], task: str, seed: int
) -> None:
    env = env_class(task=task, spare=False, backend="docker", width=1024, height=768)
    try:
        messages, _ = await env.reset(seed=seed)
        assert env.desktop is not None and env.desktop.sb.backend == "docker"
        shot = Image.open(io.BytesIO(messages[-1].images[0].data))
        assert shot.format == "PNG" and shot.size == (1024, 768)
        assert await play_oracle(env, seed=seed) == 1.0
        assert env.reset_info()["task"] == task
    finally:
        await env.close()


def test_the_backend_option_routes_the_desktop_to_the_docker_cap() -> None:
    """The registry declares the local sandbox; `--kwarg backend=docker` makes it a docker episode for
    the runner's `backend_concurrency` caps and the lock (`envhub.registration.sandbox_kind`)."""
    for env_id in ("desktop-v0", "desktop-editor-v0", "desktop-calc-v0"):
        declared = envhub.spec(env_id).provenance.default_sandbox
        assert declared == "local"
        assert sandbox_kind(declared, {}) == "local"
        assert sandbox_kind(declared, {"backend": "docker"}) == "docker"
    with pytest.raises(ValueError, match="local or docker"):
        DesktopEnv(backend="e2b")  # type: ignore[arg-type]


async def test_a_missing_image_says_how_to_build_it() -> None:
    with pytest.raises(SandboxUnavailable, match=r"sandboxes/desktop/build\.sh"):
        await Desktop(backend="docker", image="envhub/desktop:no-such-tag").start()


async def test_the_docker_desktops_terminal_reaches_no_network_and_no_host_file(tmp_path: Path) -> None:
    """Nothing of the host is bound into the container (the apps' configuration is the image's own), and
    a terminal on the desktop reaches neither the host's loopback service, the outside, nor its files."""
    assert desktop_policy(backend="docker").ro_binds == {}
    secret = tmp_path / "host-secret.txt"
    secret.write_text("the host's secret")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    desktop = await Desktop(width=1024, height=768, backend="docker").start()
    try:
        report = desktop.sb.report()
        assert report.image == DESKTOP_IMAGE and "read-only binds []" in report.controls["filesystem"].how
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
        assert (await desktop.sb.exec(["xdpyinfo"])).exit_code == 0
    finally:
        server.close()
        await desktop.close()
    assert desktop.sandbox is not None and desktop.sandbox.closed
