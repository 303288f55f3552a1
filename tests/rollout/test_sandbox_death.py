"""A sandbox that dies mid-episode: an infrastructure error, recorded, retried, and the batch goes on."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

import envhub
import envhub.sandbox as sandbox
from envhub.messages import Message, ToolCall
from envhub.policies import Policy
from envhub.rollout import RolloutLimits, run_batch
from envhub.tools import ToolSpec
from tests.sandbox.conftest import _DOCKER_SKIP

pytestmark = pytest.mark.skipif(_DOCKER_SKIP is not None, reason=_DOCKER_SKIP or "")
_ids = itertools.count()


class ShellTask(envhub.ToolEnv):
    """Echo a number through a real Docker sandbox, then answer it."""

    max_turns = 3

    def __init__(self) -> None:
        super().__init__()
        self.box: sandbox.Sandbox | None = None

    async def setup(self, rng: random.Random) -> str:
        self.box = self.box or await sandbox.open("docker")
        self.number = rng.randint(10, 99)
        return f"Echo {self.number} with the shell, then answer it."

    @envhub.tool
    async def shell(self, command: str) -> str:
        """Run a shell command."""
        assert self.box is not None
        return (await self.box.exec(command, timeout=20)).stdout

    @envhub.reward
    def right(self, answer: str) -> float:
        return float(answer.strip() == str(self.number))

    async def close(self) -> None:
        if self.box is not None:
            await self.box.close()


class KillsTheFirstContainer(Policy):
    """Solves the task, but first kills the container under episode 0 from outside, as a crash would."""

    name = "saboteur"

    def __init__(self, env: ShellTask | None = None, killed: list[str] | None = None) -> None:
        self.env, self.killed = env, killed if killed is not None else []

    def for_episode(self, env: envhub.Env) -> Policy:
        assert isinstance(env, ShellTask)
        return KillsTheFirstContainer(env, self.killed)

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Any:
        assert self.env is not None and self.env.box is not None
        if not self.killed:
            container = self.env.box._container  # type: ignore[attr-defined]
            container.kill()
            self.killed.append(container.id)
        if messages[-1].role == "tool":
            return messages[-1].text.strip()
        return Message(
            role="assistant", tool_calls=[ToolCall.create("shell", {"command": f"echo {self.env.number}"})]
        )


@pytest.fixture
def shell_task() -> str:
    env_id = f"shell-task{next(_ids)}-v0"
    envhub.register(env_id, ShellTask)
    return env_id


@pytest.mark.slow
async def test_dead_sandbox_is_an_env_error_and_the_batch_continues(shell_task: str) -> None:
    result = await run_batch(
        shell_task, KillsTheFirstContainer(), episodes=3, limits=RolloutLimits(concurrency=1, retries=0)
    )
    first, *rest = result.episodes
    assert first.error is not None and first.error.kind == "env_error"
    assert first.error.message.startswith("SandboxError")
    assert [t.action.tool_calls[0].name for t in first.turns] == []  # the step failed: no turn recorded
    assert all(e.error is None and e.reward == 1.0 for e in rest)


@pytest.mark.slow
async def test_dead_sandbox_is_retried_in_a_fresh_one(shell_task: str) -> None:
    result = await run_batch(
        shell_task, KillsTheFirstContainer(), episodes=2, limits=RolloutLimits(concurrency=1, retries=1)
    )
    assert [(e.error, e.reward, e.attempts) for e in result.episodes] == [(None, 1.0, 2), (None, 1.0, 1)]
