"""The terminal family (xterm): each oracle solves its task through the real terminal, typed as an agent
would, and each checker is strict and total.

The checkers' own tests need no desktop: the oracle's commands run in bash on the host in a scratch
folder standing in for /work (they are the task's own, fixed commands), the result is read back the way
the env reads the sandbox, and every single spoiled variant of it must score 0."""

from __future__ import annotations

import gzip
import io
import os
import random
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from envhub_desktop.actions import TypeText
from envhub_desktop.env import TerminalDesktopEnv
from envhub_desktop.tasks import FAMILIES, Episode, Saved
from envhub_desktop.tasks.terminal import MAX_ARCHIVE_MEMBERS, archive

from envhub.messages import Message, ToolCall
from envhub.policies import OraclePolicy
from envhub.rollout import run_episode

pytestmark = pytest.mark.timeout(600)

TERMINAL = sorted(task.name for task in FAMILIES["terminal"])
TASKS = {task.name: task for task in FAMILIES["terminal"]}


# --- the checkers, on the host ------------------------------------------------------------------------


def _host(path: str, root: Path) -> Path:
    return root / path.removeprefix("/work/")


def seed_files(episode: Episode, root: Path) -> None:
    """The episode's starting state in `root`, as the env makes it in the sandbox's /work."""
    for path in episode.dirs:
        _host(path, root).mkdir(parents=True, exist_ok=True)
    for path, content in episode.files.items():
        target = _host(path, root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)
        target.chmod(0o644)


def read_back(episode: Episode, root: Path) -> Saved:
    """What the env would read: the files, the trees (directories end in /), the regular files' modes."""
    files: dict[str, bytes | None] = {}
    for path in episode.reads:
        target = _host(path, root)
        files[path] = target.read_bytes() if target.is_file() and not target.is_symlink() else None
    trees: dict[str, frozenset[str] | None] = {}
    for path in episode.trees:
        top = _host(path, root)
        trees[path] = (
            frozenset(
                str(p.relative_to(top)) + ("/" if p.is_dir() and not p.is_symlink() else "")
                for p in top.rglob("*")
            )
            if top.is_dir()
            else None
        )
    modes: dict[str, int | None] = {}
    for path in episode.modes:
        target = _host(path, root)
        modes[path] = target.stat().st_mode & 0o7777 if target.is_file() and not target.is_symlink() else None
    return Saved(files, trees, modes)


def run_oracle(episode: Episode, root: Path) -> None:
    typed = "".join(action.text for action in episode.oracle if isinstance(action, TypeText))
    env = {"PATH": os.environ["PATH"], "HOME": str(root), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    done = subprocess.run(
        ["bash", "--norc", "--noprofile"],
        input=typed,
        text=True,
        cwd=root,
        env=env,
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr


def spoiled(saved: Saved) -> Iterator[tuple[str, Saved]]:
    """Every single-part spoiling of a right result: a file missing, emptied, garbage, cut short or with a
    line more; a tree missing, one entry short or one more; a mode missing or one bit off."""
    for path, data in saved.files.items():
        assert data is not None
        for how, bad in (
            ("missing", None),
            ("empty", b""),
            ("garbage", b"\xff\xfe\x00garbage"),
            ("cut", data[: len(data) // 2]),
            ("longer", data + b"extra line\n"),
        ):
            yield f"{path} {how}", Saved({**saved.files, path: bad}, saved.trees, saved.modes)
    for path, tree in saved.trees.items():
        assert tree is not None
        for how, bad_tree in (
            ("missing", None),
            ("short", tree - {max(tree)}),
            ("longer", tree | {"stray.txt"}),
        ):
            yield f"{path} {how}", Saved(saved.files, {**saved.trees, path: bad_tree}, saved.modes)
    for path, mode in saved.modes.items():
        assert mode is not None
        for how, bad_mode in (
            ("missing", None),
            ("owner x flipped", mode ^ 0o100),
            ("other r flipped", mode ^ 0o004),
        ):
            yield f"{path} {how}", Saved(saved.files, saved.trees, {**saved.modes, path: bad_mode})


@pytest.mark.parametrize("name", TERMINAL)
def test_the_oracles_commands_satisfy_the_checker_and_every_spoiling_fails_it(
    name: str, tmp_path: Path
) -> None:
    goals: set[tuple[str, tuple[tuple[str, str | bytes], ...]]] = set()
    for seed in range(12):
        episode = TASKS[name].build(random.Random(seed))
        goals.add((episode.goal, tuple(sorted(episode.files.items()))))
        root = tmp_path / str(seed)
        root.mkdir()
        seed_files(episode, root)
        assert not episode.check(read_back(episode, root)), "the untouched start already passes"
        run_oracle(episode, root)
        right = read_back(episode, root)
        assert episode.check(right), (seed, right)
        for how, bad in spoiled(right):
            assert not episode.check(bad), f"seed {seed}: passes with {how}"
        assert not episode.check(Saved({}, {}, {}))
    assert len(goals) == 12, "two seeds drew the same episode"


def test_the_goal_names_the_terminal_and_says_any_route_counts() -> None:
    for name in TERMINAL:
        episode = TASKS[name].build(random.Random(0))
        assert episode.goal.startswith("In the open terminal (xterm") and "Any route counts" in episode.goal
        assert episode.app[0] == "xterm" and TASKS[name].app == "xterm"


def _tar_gz(members: list[tuple[str, bytes]], *, dirs: tuple[str, ...] = ()) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_the_archive_checker_refuses_crafted_archives() -> None:
    """Another folder's name, a symlink in a file's place, a member lying about its size, a plain tar, a
    gzip of garbage, thousands of members: each scores 0 without unpacking anything big."""
    episode = archive(random.Random(4))
    (path,) = episode.reads
    wanted = {name.removeprefix("/work/"): content for name, content in episode.files.items()}
    assert isinstance(next(iter(wanted.values())), str)
    good = [(name, str(text).encode()) for name, text in wanted.items()]
    folder = good[0][0].split("/")[0]
    assert episode.check(Saved({path: _tar_gz(good)}))
    assert episode.check(Saved({path: _tar_gz(good, dirs=(folder,))}))
    renamed = [(name.replace(folder, "other", 1), data) for name, data in good]
    assert not episode.check(Saved({path: _tar_gz(renamed)}))
    assert not episode.check(Saved({path: _tar_gz([*good, good[0]])}))  # a member twice
    assert not episode.check(Saved({path: _tar_gz(good, dirs=("elsewhere",))}))
    link = io.BytesIO()
    with tarfile.open(fileobj=link, mode="w:gz") as tar:
        info = tarfile.TarInfo(good[0][0])
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
        for name, data in good[1:]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert not episode.check(Saved({path: link.getvalue()}))
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as tar:
        for name, data in good:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert not episode.check(Saved({path: plain.getvalue()}))
    assert not episode.check(Saved({path: gzip.compress(os.urandom(4096))}))
    many = [(f"{folder}/f{i}.txt", b"x") for i in range(MAX_ARCHIVE_MEMBERS * 4)]
    assert not episode.check(Saved({path: _tar_gz([*good, *many])}))
    huge = _tar_gz([(good[0][0], b"\0" * (64 << 20)), *good[1:]])  # 64 MiB of zeros: a small gzip
    assert len(huge) < 1 << 20
    assert not episode.check(Saved({path: huge}))


# --- the oracles, through the real xterm ----------------------------------------------------------------


async def play_oracle(env: TerminalDesktopEnv, seed: int) -> float:
    return (await run_episode(env, OraclePolicy(), seed=seed)).reward


@pytest.mark.parametrize("name", TERMINAL)
async def test_the_oracle_types_each_task_into_the_real_xterm(name: str) -> None:
    """Two seeds per task, on one env (the second reset takes the spare desktop)."""
    env = TerminalDesktopEnv(task=name)
    try:
        for seed in (1, 2):
            assert await play_oracle(env, seed) == 1.0, (name, seed)
            assert env.reset_info()["task"] == name and env.reset_info()["app"] == "xterm"
    finally:
        await env.close()


def call(name: str, **arguments: object) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create(name, dict(arguments), id=f"call_{name}")])


async def test_a_wrong_route_and_a_half_done_task_score_zero_in_the_real_xterm() -> None:
    """`wc -l FILE` writes the file's name after the count; a tree made only in part is not the tree."""
    env = TerminalDesktopEnv(task="terminal-count-lines", spare=False)
    try:
        await env.reset(seed=5)
        assert env.episode is not None
        data = next(iter(env.episode.files)).removeprefix("/work/")
        await env.step(call("type_text", text=f"wc -l {data} > count.txt\n"))
        await env.step(call("wait", seconds=1.0))
        assert env.desktop is not None
        written = (await env.desktop.sb.read_file("/work/count.txt")).decode()
        assert written.split() == [str(len(env.episode.files[f"/work/{data}"].splitlines())), data]
        result = await env.step(call("done"))
        assert result.terminated and result.reward == 0.0
    finally:
        await env.close()
    env = TerminalDesktopEnv(task="terminal-make-tree", spare=False)
    try:
        await env.reset(seed=5)
        assert env.episode is not None
        (typed,) = [action.text for action in env.episode.oracle if isinstance(action, TypeText)]
        first = typed.split("mkdir -p ")[1].split()[0]
        root = env.episode.trees[0].removeprefix("/work/")
        await env.step(call("type_text", text=f"mkdir -p {root}/{first}\n"))
        await env.step(call("wait", seconds=1.0))
        result = await env.step(call("done"))
        assert result.terminated and result.reward == 0.0
    finally:
        await env.close()
