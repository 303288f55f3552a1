"""The file-manager tasks (PCManFM): each oracle reaches 1.0 through the real GUI, a half-done run scores 0,
and each checker, fed crafted trees and bytes, accepts exactly what its goal asks for.

The crafted cases work the goal out independently: each task's wanted folder is computed here from the
goal's own words (the names between backticks) and the seeded files, so a goal that says one thing while
the checker wants another fails here."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest
from envhub_desktop.env import DesktopEnv
from envhub_desktop.tasks import FAMILIES, Episode, Saved
from envhub_desktop.tasks.files import FM_CONFIG, create, open_folder, transfer

from envhub.messages import Message

pytestmark = pytest.mark.timeout(600)

FILES = sorted(task.name for task in FAMILIES["files"])

State = dict[str, bytes | None]
"""A folder: relative path -> file content, or None for a directory."""


def quoted(goal: str) -> list[str]:
    return re.findall(r"`([^`]*)`", goal)


def start_state(episode: Episode) -> tuple[str, State]:
    (root,) = episode.trees
    state: State = {d.removeprefix(root + "/"): None for d in episode.dirs if d != root}
    for path, content in episode.files.items():
        if path.startswith(root + "/"):
            state[path.removeprefix(root + "/")] = content if isinstance(content, bytes) else content.encode()
    return root, state


def moved(state: State, old: str, new: str) -> State:
    """`old` (a file, or a folder with everything under it) renamed to `new`."""
    out: State = {}
    for rel, content in state.items():
        if rel == old or rel.startswith(old + "/"):
            rel = new + rel.removeprefix(old)
        out[rel] = content
    return out


def rename(state: State, words: list[str]) -> State:
    return moved(state, words[0], words[1])


def folder_move(state: State, words: list[str]) -> State:
    folder, *names = words
    state = {**state, folder: None}
    for name in names:
        state = moved(state, name, f"{folder}/{name}")
    return state


def copy(state: State, words: list[str]) -> State:
    name, folder = words
    return {**state, f"{folder}/{name}": state[name]}


def delete(state: State, words: list[str]) -> State:
    return {rel: c for rel, c in state.items() if rel != words[0]}


def by_extension(state: State, words: list[str]) -> State:
    ext, folder = words
    for rel in [r for r in state if "/" not in r and r.endswith(ext)]:
        state = moved(state, rel, f"{folder}/{rel}")
    return state


def new_file(state: State, words: list[str]) -> State:
    return {**state, words[0]: b""}


def move_up(state: State, words: list[str]) -> State:
    name, folder = words
    return moved(state, f"{folder}/{name}", name)


WANTED: dict[str, Callable[[State, list[str]], State]] = {
    "files-rename": rename,
    "files-folder-move": folder_move,
    "files-copy": copy,
    "files-delete": delete,
    "files-move-by-extension": by_extension,
    "files-new-file": new_file,
    "files-move-up": move_up,
    "files-rename-folder": rename,
}


def saved(root: str, state: State, episode: Episode) -> Saved:
    """What the reward would read of a folder left as `state`."""
    tree = frozenset(rel + "/" if content is None else rel for rel, content in state.items())
    files = {path: state.get(path.removeprefix(root + "/")) for path in episode.reads}
    return Saved(files, {root: tree})


def test_every_files_task_has_a_wanted_state_here() -> None:
    assert sorted(WANTED) == FILES and len(FILES) == 8


@pytest.mark.parametrize("task", FILES)
@pytest.mark.parametrize("seed", range(6))
def test_the_checker_wants_what_the_goal_says(task: str, seed: int) -> None:
    episode = FAMILIES_BY_NAME[task].build(random.Random(seed))
    root, start = start_state(episode)
    end = WANTED[task](dict(start), quoted(episode.goal))
    assert end != start
    assert episode.check(saved(root, end, episode))
    # Nothing done, the tree unread, a missing or garbled file, one entry too many or too few: all 0.
    assert not episode.check(saved(root, start, episode))
    assert not episode.check(Saved({}, {}))
    assert not episode.check(Saved(saved(root, end, episode).files, {root: None}))
    for path in episode.reads:
        rel = path.removeprefix(root + "/")
        for content in (None, b"\xff\xfe garbage", b"", (end[rel] or b"") + b"x"):
            if content != end[rel]:
                assert not episode.check(saved(root, {**end, rel: content}, episode))
    assert not episode.check(saved(root, {**end, "stray.txt": b""}, episode))
    assert not episode.check(saved(root, {**end, "stray": None}, episode))
    assert not episode.check(saved(root, {rel: c for rel, c in list(end.items())[1:]}, episode))
    huge = {f"f{i}/g{i}": b"" for i in range(20000)}
    assert not episode.check(saved(root, {**end, **huge}, episode))


def test_episodes_differ_by_seed_and_repeat_for_one() -> None:
    for task in FILES:
        build = FAMILIES_BY_NAME[task].build
        goals = {build(random.Random(seed)).goal for seed in range(8)}
        assert len(goals) > 4, task
        assert build(random.Random(1)).files == build(random.Random(1)).files


def test_each_oracle_fits_in_an_episodes_default_turns() -> None:
    """The env truncates an episode at 30 turns by default; an oracle action is one turn, done() one more."""
    turns = DesktopEnv().max_turns
    assert turns is not None
    for task in FILES:
        for seed in range(40):
            assert len(FAMILIES_BY_NAME[task].build(random.Random(seed)).oracle) < turns, (task, seed)


def test_the_file_manager_is_seeded_with_its_settings() -> None:
    """No trash (gvfs is absent), no status bar (its free-space figure would move between resets)."""
    episode = FAMILIES_BY_NAME["files-delete"].build(random.Random(0))
    assert set(FM_CONFIG) <= set(episode.files)
    assert episode.app[:2] == ["pcmanfm", "--no-desktop"]
    settings = "".join(str(v) for v in FM_CONFIG.values())
    assert "use_trash=0" in settings and "show_statusbar=0" in settings


FAMILIES_BY_NAME = {task.name: task for task in FAMILIES["files"]}


async def play(env: DesktopEnv, seed: int, steps: int | None = None) -> float:
    """Play the oracle (its first `steps` actions only, when given), then done()."""
    messages, _ = await env.reset(seed=seed)
    assert env.episode is not None
    if steps is not None:
        env.episode.oracle[:] = env.episode.oracle[:steps]
    history = list(messages)
    while True:
        action = env.reference_action(history)
        assert isinstance(action, Message)
        result = await env.step(action)
        assert "Error" not in result.observation[0].text, result.observation[0].text
        history += [action, *result.observation]
        if result.terminated or result.truncated:
            return result.reward


@pytest.mark.parametrize("task", FILES)
async def test_the_oracle_arranges_the_folder_through_pcmanfm(task: str) -> None:
    """Seed 4 (the all-task oracle test in test_desktop.py plays seed 3)."""
    env = DesktopEnv(task=task, spare=False)
    try:
        assert await play(env, seed=4) == 1.0
    finally:
        await env.close()


async def test_a_half_done_arrangement_scores_zero() -> None:
    """The folder made and one of the two files moved into it: 0."""
    env = DesktopEnv(task="files-folder-move", spare=False)
    try:
        episode = FAMILIES_BY_NAME["files-folder-move"].build(random.Random(5))
        # The folder made, the first file pasted, and the view back in the seeded folder (its pause).
        half = len(create("folder", "f")) + len(transfer(["a"], "/r", "/d")) - 1 + len(open_folder("/r"))
        assert await play(env, seed=5, steps=half) == 0.0
        assert env.desktop is not None
        root = episode.trees[0]
        folder = quoted(episode.goal)[0]
        listing = await env.desktop.sb.exec(["find", root, "-mindepth", "1", "-printf", "%P\\n"])
        assert f"{folder}/{quoted(episode.goal)[1]}" in listing.stdout.split()
    finally:
        await env.close()
