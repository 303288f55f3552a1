"""The text-editor tasks added to Mousepad's five first ones: each checker, fed crafted bytes, accepts
exactly the text its goal asks for (worked out here from the goal's own words and the seeded file), the
oracles reach 1.0 through the real editor and its dialogs (the save dialog, Find and Replace), and an
edit left unsaved scores 0. The all-task oracle test in test_desktop.py plays seed 3; these play seed 4."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest
from envhub_desktop.env import DesktopEnv
from envhub_desktop.tasks import FAMILIES, Episode, Saved

from envhub.messages import Message

pytestmark = pytest.mark.timeout(600)

TASKS = {task.name: task for task in FAMILIES["editor"]}
NEW = [
    "editor-insert-after",
    "editor-swap-lines",
    "editor-uppercase-line",
    "editor-save-as",
    "editor-fix-typo",
]


def quoted(goal: str) -> list[str]:
    return re.findall(r"`([^`]*)`", goal)


def insert_after(lines: list[str], words: list[str]) -> list[str]:
    new, after = words
    k = lines.index(after)
    return [*lines[: k + 1], new, *lines[k + 1 :]]


def swap(lines: list[str], words: list[str]) -> list[str]:
    first, second, _ = words
    k = lines.index(first)
    assert lines[k + 1] == second
    return [*lines[:k], second, first, *lines[k + 2 :]]


def uppercase(lines: list[str], words: list[str]) -> list[str]:
    return [line.upper() if line == words[0] else line for line in lines]


def save_as(lines: list[str], words: list[str]) -> list[str]:
    return words


def fix_typo(lines: list[str], words: list[str]) -> list[str]:
    word, typo, *_ = words
    return [" ".join(word if w == typo else w for w in line.split()) for line in lines]


WANTED: dict[str, Callable[[list[str], list[str]], list[str]]] = {
    "editor-insert-after": insert_after,
    "editor-swap-lines": swap,
    "editor-uppercase-line": uppercase,
    "editor-save-as": save_as,
    "editor-fix-typo": fix_typo,
}


def seeded(episode: Episode) -> list[str]:
    if not episode.files:
        return []
    (content,) = episode.files.values()
    text = content.decode() if isinstance(content, bytes) else content
    return text.removesuffix("\n").split("\n")


@pytest.mark.parametrize("task", NEW)
@pytest.mark.parametrize("seed", range(8))
def test_the_checker_wants_what_the_goal_says(task: str, seed: int) -> None:
    episode = TASKS[task].build(random.Random(seed))
    (path,) = episode.reads
    start = seeded(episode)
    want = WANTED[task](start, quoted(episode.goal))
    assert want != start

    def check(data: bytes | None) -> bool:
        return episode.check(Saved({path: data}))

    text = "\n".join(want)
    assert check(text.encode() + b"\n") and check(text.encode())
    for wrong in (
        None,
        b"",
        b"\xff\xfe not text",
        ("\n".join(start) + "\n").encode(),  # the seeded file, untouched
        text.encode() + b"\n\n",  # a blank line too many
        text.encode() + b" \n",
        text.upper().encode() if text != text.upper() else text.lower().encode(),
        ("\n".join(want[::-1]) + "\n").encode() if len(want) > 1 else b"x",
        text.encode() * 50_000,
    ):
        assert not check(wrong), wrong[:80] if wrong else wrong


def test_goals_differ_by_seed() -> None:
    for task in NEW:
        goals = {TASKS[task].build(random.Random(seed)).goal for seed in range(8)}
        assert len(goals) > 4, task


def test_each_oracle_fits_in_an_episodes_default_turns() -> None:
    turns = DesktopEnv().max_turns
    assert turns is not None
    for task in NEW:
        for seed in range(40):
            assert len(TASKS[task].build(random.Random(seed)).oracle) < turns, (task, seed)


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


@pytest.mark.parametrize("task", NEW)
async def test_the_oracle_edits_through_mousepad(task: str) -> None:
    env = DesktopEnv(task=task, spare=False)
    try:
        assert await play(env, seed=4) == 1.0
    finally:
        await env.close()


async def test_a_correction_left_unsaved_scores_zero() -> None:
    """Find and Replace done, the dialog closed, the file not saved: 0, and the file is the seed's."""
    env = DesktopEnv(task="editor-fix-typo", spare=False)
    try:
        episode = TASKS["editor-fix-typo"].build(random.Random(6))
        unsaved = len(episode.oracle) - 2  # the oracle ends with ctrl+s and its pause
        assert await play(env, seed=6, steps=unsaved) == 0.0
        assert env.desktop is not None
        (path,) = episode.reads
        seed_text = episode.files[path]
        assert await env.desktop.sb.read_file(path) == (
            seed_text if isinstance(seed_text, bytes) else seed_text.encode()
        )
    finally:
        await env.close()
