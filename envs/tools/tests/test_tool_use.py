"""envhub-tools: every kind is seeded and solvable by its oracle, tools run concurrently inside the
episode's sandbox and cannot leave it, and nothing is left behind."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from envhub_tools.calculator import CalculatorError, evaluate, format_number
from envhub_tools.corpus import load_corpus
from envhub_tools.env import ToolUse
from envhub_tools.tasks import ATTRIBUTES, KINDS

import envhub
import envhub.sandbox
from envhub.messages import Message, ToolCall
from envhub.policies import OraclePolicy, RandomPolicy
from envhub.rollout import run_batch, run_episode
from envhub.sandbox import Sandbox, close_spares
from tests.envhub_testkit.leaks import sandbox_footprint

ENV = "tool-use"


def make(kind: str | None = None) -> ToolUse:
    env = envhub.make(ENV, kind=kind)
    assert isinstance(env, ToolUse)
    return env


def calling(*calls: tuple[str, dict[str, Any]]) -> Message:
    return Message(
        role="assistant",
        tool_calls=[ToolCall.create(name, args, id=f"c{i}") for i, (name, args) in enumerate(calls)],
    )


def test_entry_point_is_discovered() -> None:
    env = envhub.make(ENV)
    assert env.spec is not None
    assert env.spec.id == "tool-use-v0"
    assert env.spec.provenance.package == "envhub-tools"
    assert {t.name for t in env.tools} == {
        "calculate",
        "list_files",
        "read_file",
        "write_file",
        "python",
        "search",
    }


@pytest.mark.parametrize("kind", [*KINDS, None])
async def test_oracle_solves_every_kind_and_seed(kind: str | None) -> None:
    batch = await run_batch(ENV, OraclePolicy(), episodes=16, seed=0, env_kwargs={"kind": kind})
    for episode in batch.episodes:
        assert episode.error is None, episode.error
        assert episode.terminated and not episode.truncated
        assert episode.reward == 1.0, (episode.seed, episode.reward_components)
        assert episode.reward_components["tool_calls"] >= 2  # every kind takes several calls
        assert episode.reward_components["tool_errors"] == 0
        assert episode.isolation is not None and episode.isolation["backend"] == "local"


async def test_the_oracle_calls_tools_in_parallel_where_it_can() -> None:
    episode = await run_episode(make("file-sum"), OraclePolicy(), seed=5)
    widest = max(len(turn.action.tool_calls) for turn in episode.turns)
    assert widest >= 3  # the invoices are read in one message


async def test_same_seed_same_episode_and_seeds_vary() -> None:
    """The whole oracle-played conversation, tool outputs included, is a function of the seed."""
    env = make()
    played = []
    for seed in (1, 1, 2, 3, 4):
        episode = await run_episode(env, OraclePolicy(), seed=seed)
        played.append(tuple(m.model_dump_json() for m in episode.messages))
    kinds = set()
    for seed in range(30):
        await env.reset(seed=seed)
        kinds.add(env.task.kind)
    await env.close()
    assert played[0] == played[1]
    assert len(set(played[1:])) == 4
    assert kinds == set(KINDS)


async def test_random_policy_scores_far_below_the_oracle() -> None:
    batch = await run_batch(ENV, RandomPolicy(seed=0), episodes=40, seed=0)
    assert all(e.error is None for e in batch.episodes)
    assert sum(e.reward for e in batch.episodes) / len(batch.episodes) < 0.1


async def test_parallel_calls_run_concurrently_and_each_gets_its_own_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = make("file-sum")
    try:
        await env.reset(seed=3)
        files = {path: text for path, text in env.task.files.items() if path.endswith(".txt")}
        assert len(files) >= 3
        # Each read waits until all of them have started: run one at a time, they would never finish.
        barrier = asyncio.Barrier(len(files))
        exec_in_sandbox = env.sandbox.exec

        async def exec_together(*args: Any, **kwargs: Any) -> Any:
            async with asyncio.timeout(60):  # a deadlock guard, not a timing assertion
                await barrier.wait()
            return await exec_in_sandbox(*args, **kwargs)

        monkeypatch.setattr(env.sandbox, "exec", exec_together)
        result = await env.step(calling(*(("read_file", {"path": path}) for path in files)))
    finally:
        await env.close()
    assert "error" not in result.info
    assert [m.tool_call_id for m in result.observation] == [f"c{i}" for i in range(len(files))]
    assert [m.text for m in result.observation] == list(files.values())


async def test_python_state_persists_and_parallel_calls_share_one_interpreter() -> None:
    env = make("csv-query")
    try:
        await env.reset(seed=0)
        first = await env.step(calling(("python", {"code": "a = 41"}), ("python", {"code": "b = 1"})))
        assert [m.text for m in first.observation] == ["(no output)", "(no output)"]
        second = await env.step(calling(("python", {"code": "a + b"}), ("calculate", {"expression": "6*7"})))
        assert [m.text for m in second.observation] == ["42\n", "42"]
        # A new episode starts a new interpreter: the old variables are gone.
        await env.reset(seed=1)
        fresh = await env.step(calling(("python", {"code": "a"})))
        assert "NameError" in fresh.observation[0].text
    finally:
        await env.close()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (("read_file", {"path": "/etc/shadow"}), "PermissionError: /etc/shadow is outside the workspace"),
        (("read_file", {"path": "../etc/passwd"}), "PermissionError: ../etc/passwd is outside the workspace"),
        (("read_file", {"path": "FOLDER/../../../etc/shadow"}), "outside the workspace"),
        (("list_files", {"path": "/"}), "PermissionError: / is outside the workspace"),
        (("write_file", {"path": "../tmp/x", "content": "1"}), "outside the workspace"),
        (("write_file", {"path": "/usr/bin/python3", "content": "1"}), "outside the workspace"),
        (("read_file", {"path": "missing.txt"}), "FileNotFoundError: missing.txt does not exist"),
        (("read_file", {"path": "FOLDER"}), "IsADirectoryError"),
        (("list_files", {"path": "FOLDER/README.md"}), "NotADirectoryError"),
        (("search", {"query": "x", "k": 0}), "k must be between 1 and 10"),
        (("calculate", {"expression": "__import__('os')"}), "CalculatorError"),
        (("nope", {}), "unknown tool 'nope'"),
        (("read_file", {"file": "x"}), "invalid arguments for read_file"),
    ],
)
async def test_tool_mistakes_are_error_observations_not_crashes(
    call: tuple[str, dict[str, Any]], message: str
) -> None:
    env = make("file-sum")
    try:
        await env.reset(seed=0)
        folder = next(iter(env.task.files)).split("/")[0]  # the task's own folder of records
        name, args = call
        args = {k: v.replace("FOLDER", folder) if isinstance(v, str) else v for k, v in args.items()}
        result = await env.step(calling((name, args)))
        assert not result.terminated
        assert result.info["error"]["kind"] == "tool_error"
        assert result.observation[0].text.startswith("Error: ")
        assert message in result.observation[0].text
        assert "root:" not in result.observation[0].text
        # The episode goes on: the agent can still answer.
        done = await env.step("0")
        assert done.terminated and done.info["reward_components"]["tool_errors"] == 1.0
    finally:
        await env.close()


async def test_links_and_python_cannot_reach_the_hosts_secrets() -> None:
    env = make("file-sum")
    try:
        await env.reset(seed=0)
        code = "import os\nos.symlink('/etc/shadow', 'shadow')\nos.mkfifo('pipe')\nopen('/etc/shadow').read()"
        planted = await env.step(calling(("python", {"code": code})))
        assert "FileNotFoundError" in planted.observation[0].text
        reads = await env.step(calling(("read_file", {"path": "shadow"}), ("read_file", {"path": "pipe"})))
        texts = [m.text for m in reads.observation]
        assert texts[0].startswith("Error: read_file failed: PermissionError: shadow is a symbolic link")
        assert texts[1].startswith("Error: read_file failed: PermissionError: pipe is a named pipe")
        written = await env.step(calling(("write_file", {"path": "shadow", "content": "x"})))
        assert written.observation[0].text.startswith("Error: write_file failed")
    finally:
        await env.close()


_LINKS = (
    "mkdir -p /work/real/sub && echo inside > /work/real/secret.txt && "
    "ln -s real/secret.txt /work/in_link && ln -s /usr/lib/os-release /work/out_link && "
    "ln -s real /work/in_dir && ln -s /usr/lib /work/out_dir && ln -s /work/real /work/abs_dir"
)


@pytest.mark.parametrize(
    "call",
    [
        ("read_file", {"path": "in_link"}),
        ("read_file", {"path": "out_link"}),
        ("read_file", {"path": "in_dir/secret.txt"}),
        ("read_file", {"path": "out_dir/os-release"}),
        ("read_file", {"path": "abs_dir/secret.txt"}),
        ("write_file", {"path": "in_link", "content": "overwritten"}),
        ("write_file", {"path": "out_link", "content": "overwritten"}),
        ("write_file", {"path": "in_dir/secret.txt", "content": "overwritten"}),
        ("write_file", {"path": "in_dir/new.txt", "content": "planted"}),
        ("write_file", {"path": "abs_dir/sub/new.txt", "content": "planted"}),
        ("list_files", {"path": "in_dir"}),
        ("list_files", {"path": "out_dir"}),
        ("list_files", {"path": "in_dir/sub"}),
        ("list_files", {"path": "abs_dir/sub"}),
    ],
    ids=lambda call: f"{call[0]}:{call[1]['path']}",
)
async def test_file_tools_refuse_a_symlink_anywhere_in_the_path(call: tuple[str, dict[str, Any]]) -> None:
    """As documented: a link (last component or a directory on the way, into /work or out of it) is a
    tool error, never followed: reading through one would show what the path does not name, and
    writing through one would change a file the agent did not name."""
    env = make("file-sum")
    try:
        await env.reset(seed=0)
        planted = await env.sandbox.exec(["sh", "-c", _LINKS], timeout=10)
        assert planted.ok, planted.stderr
        result = await env.step(calling(call))
        text = result.observation[0].text
        assert result.info["error"]["kind"] == "tool_error", text
        assert text.startswith(f"Error: {call[0]} failed: PermissionError:"), text
        assert "symbolic link" in text
        assert "inside" not in text and "Debian" not in text
        after = await env.sandbox.exec("cat real/secret.txt; ls real; ls real/sub", timeout=10)
        assert after.stdout.split() == ["inside", "secret.txt", "sub"]
    finally:
        await env.close()


async def test_file_tools_still_work_on_plain_paths_next_to_links() -> None:
    """The control for the refusals above: the same names without links work."""
    env = make("file-sum")
    try:
        await env.reset(seed=0)
        await env.sandbox.exec(["sh", "-c", _LINKS], timeout=10)
        result = await env.step(
            calling(
                ("read_file", {"path": "real/secret.txt"}),
                ("write_file", {"path": "real/sub/new.txt", "content": "made"}),
                ("list_files", {"path": "real"}),
            )
        )
        texts = [m.text for m in result.observation]
        assert texts[0] == "inside\n"
        assert texts[1].startswith("wrote 4 bytes")
        assert json.loads(texts[2]) == ["secret.txt", "sub/"]
        listed = await env.step(calling(("list_files", {"path": "."})))
        assert {"in_link", "in_dir", "real/"} <= set(json.loads(listed.observation[0].text))
    finally:
        await env.close()


@pytest.mark.timeout(120)
async def test_a_pipe_at_a_file_tools_path_is_a_tool_error_not_a_hang() -> None:
    """A named pipe nobody ever opens: writing more than a pipe buffer into it used to wait forever."""
    env = make("file-sum")
    try:
        await env.reset(seed=0)
        planted = await env.step(calling(("python", {"code": "import os\nos.mkfifo('pipe')"})))
        assert planted.observation[0].text == "(no output)"
        result = await env.step(
            calling(
                ("write_file", {"path": "pipe", "content": "x" * 200_000}),
                ("read_file", {"path": "pipe"}),
                ("list_files", {"path": "pipe"}),
            )
        )
        texts = [m.text for m in result.observation]
        assert texts[0].startswith("Error: write_file failed: PermissionError: pipe is a named pipe"), texts
        assert texts[1].startswith("Error: read_file failed: PermissionError: pipe is a named pipe"), texts
        assert texts[2].startswith("Error: list_files failed: NotADirectoryError"), texts
        assert result.info["error"]["kind"] == "tool_error"
    finally:
        await env.close()


_DEEP_TREE = (  # as deep as the env's 2000-inode cap allows: past the recursion limit and PATH_MAX
    "import os\nfor _ in range(1900):\n    os.mkdir('d' * 8); os.chdir('d' * 8)\nos.chdir('/work')\n'deep'"
)
_STOP_SELF = (
    "import os, signal, threading\nthreading.Timer(0.3, os.kill, (os.getpid(), signal.SIGSTOP)).start()"
)


@pytest.mark.timeout(180)
async def test_the_next_episode_starts_after_a_deep_tree_and_a_wedged_interpreter() -> None:
    """The agent leaves 1900 nested directories and an interpreter that stopped itself: its tools
    answer within their limits, and the next reset gives a clean, working episode."""
    env = make("file-sum")
    try:
        await env.reset(seed=0)
        made = await env.step(calling(("python", {"code": _DEEP_TREE})))
        assert made.observation[0].text == "'deep'\n", made.observation[0].text
        listed = await env.step(calling(("list_files", {"path": "dddddddd/dddddddd"})))
        assert json.loads(listed.observation[0].text) == ["dddddddd/"]
        await env.step(calling(("python", {"code": _STOP_SELF})))
        await asyncio.sleep(1)
        stuck = await env.step(calling(("python", {"code": "x = 1\n" + "#" * 300_000})))
        assert "restarted" in stuck.observation[0].text  # bounded by the tool's timeout, then replaced
        observation, _ = await env.reset(seed=1)
        assert observation
        fresh = await env.step(calling(("list_files", {"path": "."}), ("python", {"code": "6 * 7"})))
        names = json.loads(fresh.observation[0].text)
        assert names and "dddddddd/" not in names
        assert fresh.observation[1].text == "42\n"
        assert (await env.sandbox.exec("ls -A /work/dddddddd", timeout=10)).exit_code != 0
    finally:
        await env.close()


async def test_answers_never_enter_the_sandbox_or_the_prompt() -> None:
    for kind in KINDS:
        env = make(kind)
        try:
            for seed in range(8):
                observation, _ = await env.reset(seed=seed)
                answer = re.compile(rf"(?<![\d.]){env.task.expected}(?![\d.])")
                listing = await env.sandbox.exec(["find", "/work", "/tmp", "-type", "f"])
                paths = listing.stdout.split()
                assert len(paths) == len(env.task.files)
                for path in paths:
                    assert not answer.search((await env.sandbox.read_file(path)).decode()), (kind, seed)
                assert not any(answer.search(m.text) for m in observation)
        finally:
            await env.close()


async def test_a_file_task_is_graded_from_the_file_not_the_reply() -> None:
    env = make("write-report")
    try:
        await env.reset(seed=2)
        expected, output = env.task.expected, env.task.output_file
        claimed = await env.step(f"I wrote {expected} to the file.")
        assert claimed.reward == 0.0

        await env.reset(seed=2)
        await env.step(calling(("write_file", {"path": output, "content": str(expected + 1)})))
        wrong = await env.step("done")
        assert wrong.reward == 0.0

        await env.reset(seed=2)
        await env.step(calling(("write_file", {"path": output, "content": f"{expected}\n"})))
        right = await env.step("done")
        assert right.reward == 1.0
    finally:
        await env.close()


async def test_a_wrong_answer_scores_zero_and_prose_around_a_right_one_scores_one() -> None:
    env = make("file-sum")
    try:
        await env.reset(seed=9)
        expected = env.task.expected
        assert (await env.step(str(expected + 1))).reward == 0.0
        await env.reset(seed=9)
        assert (await env.step(f"The total is {expected:,} credits.")).reward == 1.0
        await env.reset(seed=9)
        assert (await env.step(f"{expected}.0")).reward == 1.0
    finally:
        await env.close()


def test_search_ranks_the_document_that_states_each_fact_first() -> None:
    corpus = load_corpus()
    assert 40 <= len(corpus.documents) <= 80
    assert len({d.title for d in corpus.documents}) == len(corpus.documents)
    asked = 0
    for attribute in ATTRIBUTES:
        for document in corpus.of_kind(attribute.kind):
            assert str(document.facts[attribute.name]) in document.text, document.id
            top = corpus.search(f"{document.title} {attribute.query}", k=3)
            assert top[0].id == document.id, (attribute.name, document.id, [d.id for d in top])
            asked += 1
    assert asked > 100
    assert corpus.search("zzz qqq", k=3) == []


async def test_the_search_tool_returns_documents_best_first() -> None:
    env = make("search-compute")
    try:
        await env.reset(seed=0)
        result = await env.step(calling(("search", {"query": "Velmora population", "k": 2})))
        found = json.loads(result.observation[0].text)
        assert found[0]["id"] == "city-velmora"
        assert len(found) == 2 and set(found[0]) == {"id", "title", "text"}  # no hidden facts
        assert "48213" in found[0]["text"]
    finally:
        await env.close()


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("2 + 3 * 4", "14"),
        ("(1200 + 345) * 3", "4635"),
        ("0.1 + 0.2", "0.3"),
        ("10 / 4", "2.5"),
        ("1 / 3", "0.333333333333"),
        ("2 ** 10", "1024"),
        ("2^10", "1024"),
        ("-(3 - 5)", "2"),
        ("7 // 2 + 7 % 4", "6"),
        ("max(3, 9, 4) - min(3, 9, 4)", "6"),
        ("sqrt(144) + abs(-1)", "13"),
        ("round(2.345, 2)", "2.35"),
        ("round(-2.5)", "-3"),
        ("2 ** 0.5", "1.41421356237"),
    ],
)
def test_calculator_evaluates_arithmetic(expression: str, value: str) -> None:
    assert format_number(evaluate(expression)) == value


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('id')", "is not allowed"),
        ("open('/etc/passwd').read()", "is not allowed"),
        ("().__class__.__bases__", "is not allowed"),
        ("x + 1", "is not allowed"),
        ("'a' * 3", "is not allowed"),
        ("True + 1", "is not allowed"),
        ("[1, 2]", "is not allowed"),
        ("(lambda: 1)()", "is not allowed"),
        ("max(key=abs)", "is not allowed"),
        ("9 ** 9 ** 9", "too large"),
        ("10 ** 100000", "too large"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("(-8) ** 0.5", "not a real number"),
        ("3 +", "not an arithmetic expression"),
        ("1 << 4", "not supported"),
        ("1" * 1001, "longer than"),
    ],
)
def test_calculator_refuses_anything_but_arithmetic(expression: str, message: str) -> None:
    with pytest.raises(CalculatorError, match=re.escape(message)):
        evaluate(expression)


def test_bad_options_are_explained() -> None:
    with pytest.raises(ValueError, match="unknown kind 'nope'; choose one of file-sum"):
        envhub.make(ENV, kind="nope")


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Sandbox]:
    """Every sandbox the environments open during the test."""
    sandboxes: list[Sandbox] = []
    real_open = envhub.sandbox.open

    async def recording_open(*args: Any, **kwargs: Any) -> Sandbox:
        sandbox = await real_open(*args, **kwargs)
        sandboxes.append(sandbox)
        return sandbox

    monkeypatch.setattr(envhub.sandbox, "open", recording_open)
    return sandboxes


async def test_a_batch_leaves_no_sandbox_process_or_directory_behind(opened: list[Sandbox]) -> None:
    before = sandbox_footprint()
    batch = await run_batch(ENV, OraclePolicy(), episodes=10, seed=0)
    random_batch = await run_batch(ENV, RandomPolicy(seed=1), episodes=10, seed=0)
    assert all(e.reward == 1.0 for e in batch.episodes)
    assert all(e.error is None for e in random_batch.episodes)
    assert opened and all(sandbox.closed for sandbox in opened)
    await close_spares()  # the loop's spares (the env's own policy has some by now) are not the batch's
    assert sandbox_footprint() == before  # only this process's own: other users of the host may be busy
