"""`harbor:PATH`: one Harbor (Terminal-Bench 2.0) task folder played as an envhub tool-use env.

The agent gets the task's instruction.md and a `bash` tool in the task's environment (its Dockerfile's
image, its [environment] limits and network policy), and calls `submit` when done. Then, as Harbor's
verifier does, tests/ is copied to /tests (it was nowhere before), tests/test.sh runs from the working
directory with the [verifier] timeout and env, and the reward is what it wrote to
/logs/verifier/reward.json (read first) or reward.txt. Before the tests arrive the verifier folder is
emptied: a reward the agent wrote there, or tests it planted in /tests, are gone.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import math
import random
import shlex
import tarfile
from pathlib import Path
from typing import Any

from envhub.authoring.chat import Reaction
from envhub.authoring.rewards import reward
from envhub.authoring.tool_env import ToolEnv
from envhub.core import Action, EpisodeStateError
from envhub.integrations.harbor.runtime import (
    COMMAND_LIMIT_S,
    Runtime,
    Workspace,
    open_workspace,
    plan_local,
)
from envhub.integrations.harbor.task import HarborTask, resolve_env
from envhub.messages import Message, ToolCall
from envhub.sandbox import ExecResult
from envhub.sandbox.workspace import checked_kind
from envhub.tools import tool

MAX_OUTPUT = 16_000
"""Characters of command output shown to the agent; the rest is cut from the middle."""


class HarborEnv(ToolEnv):
    """A Harbor task folder: shell access to the task's machine, graded by the task's own tests."""

    max_turns = 50
    system_prompt = (
        "You are working on a task in a Linux environment. Use the bash tool to run commands; each call "
        "starts a fresh shell in the working directory, and processes you leave running are stopped when "
        "the call returns. When the task is done, call submit: the task's tests then check the state you "
        "leave behind."
    )

    def __init__(
        self, path: str | Path, *, runtime: Runtime = "docker", max_turns: int | None = None
    ) -> None:
        super().__init__(max_turns=max_turns)
        self.task = HarborTask(path)
        self.runtime: Runtime = checked_kind(runtime)
        self._local = plan_local(self.task) if runtime == "local" else None
        """The local runtime's plan, made here so a task it cannot honour is refused by make()."""
        self.rewards: dict[str, float] | None = None
        """What the tests wrote, by name (reward.txt's number is {"reward": number}); None before grading."""
        self.verifier_output = ""
        """The tail of test.sh's stdout and stderr, kept with the episode's notes."""
        self.reward_notes: dict[str, str] = {}
        self._workspace: Workspace | None = None
        self._submitted = False
        self._agent_time_left = math.inf
        self._grading = asyncio.Lock()

    # -- episode lifecycle ----------------------------------------------------------------------------

    async def setup(self, rng: random.Random) -> str:
        await self._close_workspace()
        self.rewards, self.verifier_output, self.reward_notes = None, "", {}
        self._submitted = False
        self._agent_time_left = self.task.config.agent.timeout_sec or math.inf
        self._workspace = await open_workspace(self.task, self.runtime, self._local)
        return self.task.instruction

    def reset_info(self) -> dict[str, Any]:
        workspace = self.workspace
        return {
            "task": self.task.name,
            "runtime": self.runtime,
            "workdir": workspace.workdir,
            **{f"runtime_{key}": value for key, value in workspace.notes.items() if value},
            "isolation": workspace.sandbox.report().model_dump(mode="json"),
        }

    async def react(self, message: Message) -> Reaction:
        reaction = await super().react(message)
        out_of_time = self._agent_time_left <= 0
        if (self._submitted or out_of_time) and not reaction.done:
            info = {**reaction.info, **({"agent_timeout": True} if out_of_time else {})}
            return Reaction(observation=reaction.observation, done=True, info=info)
        return reaction

    async def close(self) -> None:
        await self._close_workspace()

    async def _close_workspace(self) -> None:
        if self._workspace is not None:
            workspace, self._workspace = self._workspace, None
            await workspace.close()

    @property
    def workspace(self) -> Workspace:
        if self._workspace is None:
            raise EpisodeStateError("the task's environment is not open: call reset() first")
        return self._workspace

    # -- tools ----------------------------------------------------------------------------------------

    @tool
    async def bash(self, command: str, timeout: float = 120.0) -> str:  # noqa: ASYNC109 - the agent sets it
        """Run a shell command in the task's environment; returns its output and exit status.

        Args:
            command: The command line, run by bash in the working directory.
            timeout: Seconds before the command is killed (at most 600, and within the task's time).
        """
        if self._submitted:
            raise RuntimeError("the work was submitted; no more commands run")
        limit = min(max(timeout, 1.0), COMMAND_LIMIT_S, self._agent_time_left)
        if limit <= 0:
            raise TimeoutError("the task's agent time ([agent].timeout_sec) is used up")
        result = await self.workspace.sandbox.exec(["bash", "-c", command], timeout=limit)
        self._agent_time_left -= result.wall_time_s
        return _clip(_describe(result))

    @tool
    async def submit(self) -> str:
        """Say the task is done; this ends the episode and the task's tests run."""
        self._submitted = True
        return "submitted; the task's tests run now"

    # -- grading --------------------------------------------------------------------------------------

    async def grade(self) -> dict[str, float]:
        """Run the task's tests once per episode (at submit, the turn limit or the agent's time limit)."""
        async with self._grading:
            if self.rewards is None:
                self._submitted = True  # nothing of the agent's runs from here on
                try:
                    self.rewards = await self._verify(self.workspace)
                finally:
                    await self._close_workspace()
            return self.rewards

    async def _verify(self, workspace: Workspace) -> dict[str, float]:
        verifier = self.task.config.verifier
        await workspace.stage_tests(self.task)
        result = await workspace.sandbox.exec(
            [f"{workspace.tests}/test.sh"],
            cwd=workspace.workdir,
            env=resolve_env(verifier.env),
            timeout=verifier.timeout_sec or None,
        )
        self.verifier_output = _clip(_describe(result))[-4000:]
        if result.timed_out:
            return self._zero(f"tests/test.sh ran past [verifier].timeout_sec = {verifier.timeout_sec:g} s")
        try:
            raw_json = await workspace.read_reward("reward.json")
            raw_text = None if raw_json is not None else await workspace.read_reward("reward.txt")
            rewards = parse_rewards(raw_json, raw_text)
        except ValueError as exc:
            return self._zero(str(exc))
        self.reward_notes = {"reward": f"the tests wrote {json.dumps(rewards)}"}
        return rewards

    def _zero(self, why: str) -> dict[str, float]:
        self.reward_notes = {"reward": f"0: {why}; test.sh said: {self.verifier_output[-1000:]}"}
        return {}

    @reward
    async def reward(self) -> float:
        """The tests' reward: reward.json's "reward" (or its only value), else reward.txt's number."""
        return main_reward(await self.grade())

    # -- the oracle -----------------------------------------------------------------------------------

    def reference_action(self, messages: list[Message]) -> Action:
        """Harbor's oracle: unpack solution/ at /solution and run solve.sh from the working directory, then
        submit."""
        if any(m.role == "tool" for m in messages):
            return Message(role="assistant", tool_calls=[ToolCall.create("submit", {}, id="submit")])
        if not self.task.has_solution:
            raise EpisodeStateError(f"{self.task.path} has no solution/solve.sh to play")
        timeout = min(COMMAND_LIMIT_S, self.task.config.agent.timeout_sec or COMMAND_LIMIT_S)
        return Message(
            role="assistant",
            tool_calls=[
                ToolCall.create("bash", {"command": self._oracle_command(), "timeout": timeout}, id="oracle")
            ],
        )

    def _oracle_command(self) -> str:
        workspace = self.workspace
        archive = base64.encodebytes(_tar_gz(self.task.solution_dir)).decode()
        exports = "".join(
            f"export {key}={shlex.quote(value)}\n"
            for key, value in {
                "DEBIAN_FRONTEND": "noninteractive",
                **resolve_env(self.task.config.solution.env),
            }.items()
        )
        return (
            f"set -e\nmkdir -p {workspace.solution}\n"
            f"base64 -d <<'ENVHUB_SOLUTION' | tar -xz -C {workspace.solution}\n{archive}ENVHUB_SOLUTION\n"
            f"{exports}cd {shlex.quote(workspace.workdir)}\n/solution/solve.sh\n"
        )


def parse_rewards(raw_json: bytes | None, raw_text: bytes | None) -> dict[str, float]:
    """The tests' rewards as Harbor's verifier reads them (`harbor/verifier/verifier.py`): reward.json, a
    number or an object of finite numbers, wins over reward.txt, one finite number; ValueError says why."""
    if raw_json is not None:
        try:
            data = json.loads(raw_json)
        except ValueError:
            raise ValueError("reward.json is not JSON") from None
        values = data if isinstance(data, dict) else {"reward": data}
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"reward.json's {name!r} is {value!r}, not a finite number")
        if not values:
            raise ValueError("reward.json is empty")
        return {str(name): float(value) for name, value in values.items()}
    if raw_text is None:
        raise ValueError("the tests wrote neither /logs/verifier/reward.json nor reward.txt")
    try:
        number = float(raw_text.decode(errors="replace").strip())
    except ValueError:
        raise ValueError(f"reward.txt holds {raw_text[:80]!r}, not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"reward.txt holds {number}, not a finite number")
    return {"reward": number}


def main_reward(rewards: dict[str, float]) -> float:
    """The episode's reward: "reward" when the tests name it, the only value when there is one, else 0."""
    if "reward" in rewards:
        return rewards["reward"]
    if len(rewards) == 1:
        return next(iter(rewards.values()))
    return 0.0


def _tar_gz(directory: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(directory.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(directory).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.name == "solve.sh" and path.parent == directory:
                info.mode = 0o755
            if path.is_file():
                with path.open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def _clip(text: str) -> str:
    if len(text) <= MAX_OUTPUT:
        return text
    half = MAX_OUTPUT // 2
    return f"{text[:half]}\n... [{len(text) - MAX_OUTPUT} characters cut] ...\n{text[-half:]}"


def _describe(result: ExecResult) -> str:
    output = result.stdout + (("\n" if result.stdout and result.stderr else "") + result.stderr)
    if result.timed_out:
        return f"{output}\n[killed: timed out]"
    return f"{output}\n[exit code {result.exit_code}]"
