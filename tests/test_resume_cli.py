"""Kill the real `envhub rollout` process with SIGKILL mid-batch, then resume: nothing lost, nothing twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envhub.store import load_manifest, read_episodes

EPISODES = 200


def rollout(out: Path, site: Path, *extra: str) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "envhub", "rollout", "testplug/slow", "--kwarg", "delay=0.01",
        "--episodes", str(EPISODES), "--concurrency", "4", "--shard-size", "16", "--out", str(out), *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "120"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_kill_9_mid_batch_then_resume_completes_exactly(plugin_site: Path, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    process = rollout(out, plugin_site)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stored = len(read_episodes(out)) if (out / "manifest.json").exists() else 0
        if stored >= 40:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    survivors = read_episodes(out)
    assert 40 <= len(survivors) < EPISODES, (
        "the batch must be interrupted midway for this test to mean anything"
    )
    assert len({e.episode_id for e in survivors}) == len(survivors)

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
    while not (out / "journal.jsonl").exists() or (out / "journal.jsonl").stat().st_size == 0:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 130, output
    assert "run the same command with --resume to finish" in output
    manifest = load_manifest(out)
    assert manifest is not None and manifest.episodes_done == len(read_episodes(out)) > 0
    assert not (out / "journal.jsonl").exists()  # compacted into a shard on the way out
