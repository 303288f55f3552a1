"""`Env.fork` and `envhub rollout --fork-at`: children start in their parent's state mid-episode (its
messages, its tool state, a copy of its sandbox) and from there each goes its own way, graded on its own."""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

import envhub
from envhub.cli import app
from envhub.core import NotForkable
from envhub.messages import Message, ToolCall
from envhub.policies import load_policy
from envhub.rollout import run_fork_group, summarize
from envhub.sandbox import PythonWorker
from envhub.store import read_episodes
from tests.envhub_testkit.leaks import sandbox_footprint

COUNTER_ID = "test-fork-counter-v0"


class Counter(envhub.ToolEnv):
    """Adds numbers to a running total; the answer must be the total."""

    def setup(self, rng: random.Random) -> str:
        self.total = 0
        self.added: list[int] = []
        self.busy = asyncio.Lock()
        return "Add numbers with the tool, then answer the total."

    @envhub.tool
    def add(self, x: int) -> int:
        """Add x to the total.

        Args:
            x: The number to add.
        """
        self.total += x
        self.added.append(x)
        return self.total

    @envhub.reward
    def exact(self, answer: str) -> float:
        return float(answer.strip() == str(self.total))


def add(x: int) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create("add", {"x": x}, id=f"call_{x}")])


async def test_children_start_where_the_parent_is_and_diverge_independently() -> None:
    env = Counter()
    await env.reset(seed=1)
    await env.step(add(2))
    await env.step(add(3))
    children = await env.fork(3)
    assert len({id(c) for c in children}) == 3
    for child in children:
        assert child.messages == env.messages and child.turn == env.turn == 2
        assert child.total == 5 and child.added == [2, 3] and child.added is not env.added
        assert child.busy is not env.busy
    low, high, same = children
    await low.step(add(10))
    await high.step(add(100))
    assert (env.total, low.total, high.total, same.total) == (5, 15, 105, 5)
    assert env.added == [2, 3] and same.added == [2, 3]
    results = [await c.step("15") for c in (low, high, same)] + [await env.step("5")]
    assert [r.reward for r in results] == [1.0, 0.0, 0.0, 1.0]  # each graded on its own total
    assert all(r.terminated for r in results)


async def test_an_env_that_declares_it_cannot_fork_says_why() -> None:
    class Remote(Counter):
        forkable = "it drives a game server whose state lives elsewhere; play each child from reset"

    env = Remote()
    await env.reset(seed=0)
    with pytest.raises(NotForkable, match="cannot fork: it drives a game server"):
        await env.fork(2)


async def test_an_attribute_that_cannot_be_copied_is_named() -> None:
    class Threaded(Counter):
        def setup(self, rng: random.Random) -> str:
            self.guard = threading.Lock()
            return super().setup(rng)

    env = Threaded()
    await env.reset(seed=0)
    with pytest.raises(NotForkable, match=r"attribute 'guard' \(lock\) cannot be copied.*__fork__"):
        await env.fork(1)


async def test_the_fork_hook_decides_what_a_child_shares() -> None:
    class Shared(Counter):
        def setup(self, rng: random.Random) -> str:
            self.client = threading.Lock()  # stands in for a connection: shared, never copied
            return super().setup(rng)

        async def __fork__(self, memo: dict[int, object]) -> Shared:
            memo[id(self.client)] = self.client
            return await super().__fork__(memo)

    env = Shared()
    await env.reset(seed=0)
    (child,) = await env.fork(1)
    assert child.client is env.client and child.added is not env.added


# -- through a real sandbox: tool-use's write-report is graded from the file in the sandbox ----------------


async def _oracle_steps(env: envhub.Env, messages: list[Message], steps: int) -> None:
    for _ in range(steps):
        action = env.reference_action(messages)
        assert action is not None
        result = await env.step(action)
        messages += [envhub.core.parse_action(action), *result.observation]


async def test_a_tool_env_forked_after_edits_grades_each_child_on_its_own_files() -> None:
    env = envhub.make("tool-use-v0", kind="write-report")
    children: list[envhub.Env] = []
    try:
        observation, _ = await env.reset(seed=3)
        messages = list(observation)
        await _oracle_steps(env, messages, 3)  # read the log, compute, write the report
        task = env.task  # type: ignore[attr-defined]
        right = (await env.sandbox.read_file(f"/work/{task.output_file}")).decode()  # type: ignore[attr-defined]
        children = await env.fork(2)
        keeps, spoils = children
        wrong = ToolCall.create("write_file", {"path": task.output_file, "content": "1"}, id="w")
        await spoils.step(Message(role="assistant", tool_calls=[wrong]))
        assert (await keeps.step("done")).reward == 1.0
        assert (await spoils.step("done")).reward == 0.0
        assert (await env.sandbox.read_file(f"/work/{task.output_file}")).decode() == right  # type: ignore[attr-defined]
        assert (await env.step("done")).reward == 1.0
    finally:
        for e in (*children, env):
            await e.close()


def python(code: str, call_id: str = "p") -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create("python", {"code": code}, id=call_id)])


async def run_python(env: envhub.Env, code: str) -> str:
    return (await env.step(python(code))).observation[0].text


async def test_a_started_python_repl_forks_by_replaying_its_cells_and_children_diverge() -> None:
    """tool-use's REPL: the child's interpreter, new in the child's sandbox, ran the parent's cells again,
    so it holds their variables (and the files they wrote); from there a variable set in one child is in
    neither the other nor the parent, and a cell whose output cannot repeat is named."""
    env = envhub.make("tool-use-v0", kind="write-report")
    children: list[envhub.Env] = []
    try:
        await env.reset(seed=3)
        await run_python(env, "x = 41\nopen('made.txt', 'w').write('by the parent')")
        await run_python(env, "import random\nrandom.random()")  # not the same number twice
        children = await env.fork(2)
        one, other = children
        assert await run_python(one, "x + 1") == "42\n"
        assert await run_python(other, "open('made.txt').read()") == "'by the parent'\n"
        await run_python(one, "y = 'only in one'")
        assert "NameError" in await run_python(other, "y")
        assert "NameError" in await run_python(env, "y")
        assert await run_python(env, "x") == "41\n"
        for child in children:
            worker = child._worker  # type: ignore[attr-defined]
            assert worker.diverged == [1]  # the random number, and nothing else
            assert worker is not env._worker and worker._sandbox is child.sandbox  # type: ignore[attr-defined]
    finally:
        for e in (*children, env):
            await e.close()


async def test_a_repl_fork_that_cannot_replay_closes_what_it_opened() -> None:
    """A cell that kills the interpreter when run again (here: once its file exists) fails the fork,
    saying which cell; the child's sandbox is closed, nothing is left behind."""
    env = envhub.make("tool-use-v0", kind="write-report")
    try:
        await env.reset(seed=3)
        guard = "import os\nif os.path.exists('ran'): os._exit(3)\nopen('ran', 'w').close()"
        await run_python(env, guard)
        before = sandbox_footprint()
        with pytest.raises(envhub.sandbox.SandboxError, match=r"replaying cell 0 .* lost the interpreter"):
            await env.fork(1)
        assert sandbox_footprint() == before
    finally:
        await env.close()


class WorkerFirst(envhub.ToolEnv):
    """Holds its REPL in an attribute made before its sandbox's: the worker is forked first."""

    def __init__(self) -> None:
        super().__init__()
        self.worker: PythonWorker | None = None
        self.box: envhub.sandbox.Sandbox | None = None

    async def setup(self, rng: random.Random) -> str:
        self.box = await envhub.sandbox.open("local")
        self.worker = await self.box.python()
        return "Use the REPL."

    async def close(self) -> None:
        if self.worker is not None:
            await self.worker.close()
        if self.box is not None:
            await self.box.close()


async def test_a_worker_forked_before_its_sandbox_forks_it_once_for_the_child() -> None:
    env = WorkerFirst()
    children: list[WorkerFirst] = []
    try:
        await env.reset(seed=0)
        assert env.worker is not None
        await env.worker.run("x = 1\nopen('f', 'w').write('parent')")
        before = sandbox_footprint()  # the parent's sandbox (and any spare the pool keeps) included
        children = await env.fork(2)
        for child in children:
            assert child.worker is not None and child.box is not None and child.box is not env.box
            assert child.worker._sandbox is child.box  # the one sandbox the child holds, not a second
            assert (await child.worker.run("x, open('f').read()")).stdout == "(1, 'parent')\n"
        for child in children:
            await child.close()
        assert sandbox_footprint() == before
    finally:
        for e in (*children, env):
            await e.close()


async def test_run_fork_group_records_the_prefix_and_whole_children() -> None:
    env = envhub.make("tool-use-v0", kind="write-report")
    try:
        episodes = await run_fork_group(
            env, load_policy("oracle"), fork_at=2, group=2, seed=3, episode_ids=["p", "c1", "c2"]
        )
    finally:
        await env.close()
    prefix, *children = episodes
    assert prefix.ending == "unfinished" and len(prefix.turns) == 2 and prefix.parent is None
    for child in children:
        assert child.parent == "p" and child.fork_turn == 2 and child.reward == 1.0
        assert child.turns[:2] == prefix.turns and len(child.turns) == 4 and child.terminated
    assert [e.episode_id for e in episodes] == ["p", "c1", "c2"]


def test_rollout_fork_at_stores_parent_and_fork_turn(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        ["rollout", "tool-use-v0", "--kwarg", "kind=write-report", "-n", "2", "--fork-at", "2",
         "--group", "2", "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    episodes = read_episodes(out)
    assert [(e.episode_id, e.parent, e.fork_turn) for e in episodes] == [
        ("000000", None, None),
        ("000001", "000000", 2),
        ("000002", "000000", 2),
        ("000003", None, None),
        ("000004", "000003", 2),
        ("000005", "000003", 2),
    ]
    assert all(e.reward == 1.0 for e in episodes if e.parent is not None)
    assert episodes[1].seed == episodes[0].seed != episodes[3].seed
    summary = summarize(episodes)  # the shared prefixes are not rollouts of their tasks
    assert (summary.episodes, summary.tasks, summary.rollouts, summary.reward_mean) == (4, 2, 2, 1.0)


def test_rollout_fork_at_refuses_an_env_that_cannot_fork(tmp_path: Path) -> None:
    class Remote(Counter):
        forkable = "its state lives on a server; play each child from reset"

    envhub.register(COUNTER_ID, Remote, override=True)
    result = CliRunner().invoke(
        app, ["rollout", COUNTER_ID, "-n", "1", "--fork-at", "1", "--out", str(tmp_path / "run")]
    )
    assert result.exit_code != 0
    assert "cannot fork: its state lives on a server" in result.output


async def test_a_swe_episode_forked_after_edits_grades_each_childs_patch_on_its_own() -> None:
    """swe-mini on the local runtime: two edits, a fork, one child applies the gold patch and the other
    submits only the edits; each is graded on its own files, and neither's patch reaches the parent."""
    pytest.importorskip("envhub_swe")
    env = envhub.make("swe-mini", instance="mini__stats-1", runtime="local")
    children: list[envhub.Env] = []
    try:
        await env.reset(seed=0)
        for i, note in enumerate(("first", "second")):
            call = ToolCall.create("create", {"path": f"NOTES-{i}.md", "content": note}, id=f"edit{i}")
            await env.step(Message(role="assistant", tool_calls=[call]))
        children = await env.fork(2)
        fixed, unfixed = children
        patch = fixed.instance.patch  # type: ignore[attr-defined]
        apply = ToolCall.create("bash", {"command": f"git apply - <<'EOF'\n{patch}EOF\n"}, id="gold")
        applied = await fixed.step(Message(role="assistant", tool_calls=[apply]))  # this child's only
        assert "exit code 0" in applied.observation[0].text
        submit = Message(role="assistant", tool_calls=[ToolCall.create("submit", {}, id="submit")])
        fixed_result, unfixed_result = await fixed.step(submit), await unfixed.step(submit)
        assert fixed_result.terminated and unfixed_result.terminated
        assert (fixed_result.reward, unfixed_result.reward) == (1.0, 0.0)
        for child in children:
            assert "NOTES-0.md" in (child.patch or "") and "NOTES-1.md" in (child.patch or "")  # type: ignore[attr-defined]
        diff = await env.sandbox.exec("git status --porcelain", cwd="/testbed")  # type: ignore[attr-defined]
        assert sorted(diff.stdout.split()) == ["??", "??", "NOTES-0.md", "NOTES-1.md"]
    finally:
        for e in (*children, env):
            await e.close()
