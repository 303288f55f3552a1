"""What the Harbor tests share: the task folders, the runtimes each can run on, and scripted agents."""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

import envhub
from envhub.integrations.harbor.env import HarborEnv
from envhub.messages import Message, ToolCall
from tests.envhub_testkit.leaks import sandbox_footprint

TASKS = Path(__file__).resolve().parents[2] / "data" / "harbor_tasks"

PLAYS = [
    ("edit-config", "docker"),
    ("edit-config", "local"),
    ("fix-python-script", "docker"),
    ("fix-python-script", "local"),
    ("word-frequency", "docker"),
    ("word-frequency", "local"),
    ("hello-json", "docker"),
    ("hello-json", "local"),
    ("order-total", "docker"),  # its Dockerfile runs shell commands: docker only
    ("pip-table", "local"),  # FROM python:3.11-slim is not loaded in the offline engine: local only
]
"""Each task folder on each runtime it can run on here."""


def make(task: str, runtime: str) -> HarborEnv:
    """The env of a task folder, made by id through the registry as a user makes it."""
    env = envhub.make(f"harbor:{TASKS / task}", runtime=runtime)
    assert isinstance(env, HarborEnv)
    return env


def call(tool: str, **arguments: object) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(tool, dict(arguments), id=f"{tool}-call")])


async def play_commands(env: HarborEnv, *commands: str) -> float:
    """Reset, run each command with the bash tool, submit; the episode's reward."""
    await env.reset(seed=0)
    for command in commands:
        result = await env.step(call("bash", command=command))
        assert not result.terminated, result.observation
    result = await env.step(call("submit"))
    assert result.terminated
    return result.reward


def _containers() -> list[str]:
    client = docker.from_env(timeout=30)
    try:
        mine = {"envhub.owner": str(os.getpid())}
        found = client.containers.list(all=True, filters={"label": [f"{k}={v}" for k, v in mine.items()]})
        return sorted(str(c.id) for c in found)
    finally:
        client.close()


def _stages() -> list[str]:
    found = glob.glob(os.path.join(tempfile.gettempdir(), "envhub-harbor-*"))
    return sorted(path for path in found if not path.endswith("envhub-harbor-pip"))  # the pip cache stays


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    """Every episode leaves nothing behind: no container, sandbox scratch or staged test folder."""
    before = (sandbox_footprint(), _containers(), _stages())
    yield
    after = (sandbox_footprint(), _containers(), _stages())
    assert after == before, f"leftovers: before={before} after={after}"
