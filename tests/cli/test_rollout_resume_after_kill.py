"""Kill the real `envhub rollout` process with SIGKILL mid-batch, then resume: nothing lost, nothing twice.

Episodes from HELD on wait for a release file (the test plugin's `Slow` env), so every interruption
lands mid-batch whatever the machine's load: the tests wait for what they can observe, never for a time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envhub.store import JOURNAL, MANIFEST, load_manifest, read_episodes

EPISODES = 200
HELD = 40  # seeds 0-39 can finish before the release file exists: two shards of 16 and 8 in the journal


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_rollout_outlives_its_test() -> Iterator[None]:
    """A failed test must not leave a rollout waiting forever for its release file."""
    yield
    while _STARTED:
        process = _STARTED.pop()
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def as_from_a_terminal() -> None:
    """SIGINT at its default in the rollout, as a shell gives a command it runs in the foreground.

    A test run started in the background by a non-interactive shell (`make test &`, a CI wrapper) inherits
    SIGINT ignored, and POSIX keeps an ignored signal ignored across exec: Python then installs no
    KeyboardInterrupt handler, and the rollout rightly ignores the test's Ctrl-C. That was the "hang"
    this test showed twice in clean-clone runs (and never in the foreground)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def rollout(out: Path, site: Path, *extra: str) -> subprocess.Popen[str]:
    release = out.parent / "release"
    command = [
        sys.executable, "-m", "envhub", "rollout", "testplug/slow", "--kwarg", "delay=0.01",
        "--kwarg", f"hold_from={HELD}", "--kwarg", f"release={release}",
        "--episodes", str(EPISODES), "--concurrency", "4", "--shard-size", "16", "--out", str(out), *extra,
    ]  # fmt: skip
    # PYTHONFAULTHANDLER: a hung rollout, aborted by finish(), prints every thread's stack
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "120", "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    _STARTED.append(process)
    return process


def wait_for_stored(out: Path, process: subprocess.Popen[str], count: int) -> None:
    """Until `count` episodes are stored (journal or shards): the observable sign of a batch underway."""
    deadline = time.monotonic() + 120  # a guard against a hang, not a guess: the episodes are quick
    while not (out / MANIFEST).exists() or len(read_episodes(out)) < count:
        assert process.poll() is None, f"the rollout ended early: {process.communicate()[0]}"
        assert time.monotonic() < deadline, f"{count} episodes were not stored in 120 s"
        time.sleep(0.05)


def finish(process: subprocess.Popen[str]) -> str:
    """The process's output once it exits; after 120 s (a hang, not a slow host) it is aborted, so that
    its fault handler prints where each thread waits, and the test fails with what it printed."""
    try:
        return process.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        try:
            output = process.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            process.kill()
            output = process.communicate()[0]
        pytest.fail(f"the rollout did not exit within 120 s of the signal:\n{output}")


@pytest.mark.slow
def test_kill_9_mid_batch_then_resume_completes_exactly(plugin_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    process = rollout(out, plugin_site)
    wait_for_stored(out, process, HELD)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    survivors = read_episodes(out)
    assert len(survivors) == HELD
    assert len({e.episode_id for e in survivors}) == len(survivors)

    (tmp_path / "release").touch()
    resumed = rollout(out, plugin_site, "--resume")
    output, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, output
    episodes = read_episodes(out)
    assert [e.episode_id for e in episodes] == [f"{i:06d}" for i in range(EPISODES)]
    assert [e.seed for e in episodes] == list(range(EPISODES))
    before = {e.episode_id: e for e in survivors}
    assert all(before[e.episode_id] == e for e in episodes if e.episode_id in before)
    manifest = load_manifest(out)
    assert manifest is not None and manifest.complete and manifest.episodes_done == EPISODES
    assert f"this run: {EPISODES - len(survivors)}" in output


@pytest.mark.slow
def test_ctrl_c_stores_what_finished_and_says_how_to_resume(plugin_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    process = rollout(out, plugin_site)
    wait_for_stored(out, process, 1)  # the held episodes keep the batch from finishing before the signal
    process.send_signal(signal.SIGINT)
    output = finish(process)
    assert process.returncode == 130, output
    assert "run the same command with --resume to finish" in output
    manifest = load_manifest(out)
    assert manifest is not None and manifest.episodes_done == len(read_episodes(out)) > 0
    assert not (out / JOURNAL).exists()  # compacted into a shard on the way out
