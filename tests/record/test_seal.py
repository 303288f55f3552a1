"""Recordings bound to their episode: forged, spliced and edited ones are refused by `replay` and `rescore`.

The attack these tests keep (red-team pass of issue 28): a wrong code answer (`return True`) rolled out
with --record, its recording spliced with the grade of an honest episode of the same task (whose HMAC
nonce was recorded in the clear, so the spliced report still verified) and its stored reward edited to
1.0: `envhub rescore` reported `0 rewards changed, 0 diverged` and `replay` a reward of 1.0. Real envs,
the real local sandbox and the real grader throughout; the batch is edited as its Parquet shard.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.policies import load_policy
from envhub.policies.scripted import ScriptedPolicy
from envhub.record import seal
from envhub.record.calls import RecordedCall
from envhub.record.replay import replay_episode
from envhub.records import Episode
from envhub.rollout import RolloutLimits, rollout
from envhub.store import load_manifest, read_episodes
from envhub.store.schema import episodes_table

cli = CliRunner()
ENV = "code-single-v0"
WRONG = "```python\ndef shift_letters(text):\n    return True\n```"
"""A wrong answer to the first built-in task (it fails every hidden test)."""


@pytest.fixture(autouse=True)
def recording_key(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A recording key of the test's own, outside every batch folder (never the user's)."""
    path = tmp_path_factory.mktemp("config") / "recording.key"
    monkeypatch.setenv(seal.KEY_FILE_ENV, str(path))
    return path


def task_id() -> str:
    from envhub_code.tasks import builtin_tasks

    return builtin_tasks()[0].id


def record(out: Path, policy: Any) -> Episode:
    asyncio.run(
        rollout(
            ENV,
            policy,
            episodes=1,
            limits=RolloutLimits(record=True),
            env_kwargs={"task": task_id()},
            out=out,
        )
    )
    (episode,) = read_episodes(out)
    return episode


def rewrite(run: Path, episode: Episode) -> None:
    """Replace the batch's one stored episode by `episode`, in its Parquet shard, as an editor would."""
    manifest = load_manifest(run)
    assert manifest is not None
    (shard,) = run.glob("shard-*.parquet")
    pq.write_table(episodes_table([episode], manifest.spec), shard)


def splice(honest: Episode, wrong: Episode) -> Episode:
    """The wrong answer's row carrying the honest episode's grade: its recorded grader calls (nonce,
    canaries, the grader's signed output) and its observations, reward and components. Only the
    wrong answer's own call (writing its solution) is kept, so a replay of it makes every call it
    recorded."""
    assert honest.recording is not None and wrong.recording is not None
    (written,) = [c for c in wrong.recording.calls if c.method == "write_file"]
    calls = [written if c.method == "write_file" else c for c in honest.recording.calls]
    turns = [
        h.model_copy(update={"action": w.action}) for h, w in zip(honest.turns, wrong.turns, strict=True)
    ]
    return wrong.model_copy(
        update={
            "turns": turns,
            "recording": wrong.recording.model_copy(update={"calls": calls}),
            "reward": honest.reward,
            "reward_components": honest.reward_components,
        }
    )


@pytest.fixture
def batches(tmp_path: Path) -> tuple[Path, Episode, Path, Episode]:
    """An honest batch (the reference solution) and a wrong one (`return True`), one episode each."""
    honest = record(tmp_path / "honest", load_policy("oracle"))
    wrong = record(tmp_path / "wrong", ScriptedPolicy([WRONG]))
    assert honest.reward == 1.0 and wrong.reward == 0.0
    return tmp_path / "honest", honest, tmp_path / "wrong", wrong


# -- the attack of the red-team pass ----------------------------------------------------------------------


def test_a_spliced_recording_with_an_edited_reward_is_refused(
    batches: tuple[Path, Episode, Path, Episode],
) -> None:
    _, honest, run, wrong = batches
    rewrite(run, splice(honest, wrong))
    shown = cli.invoke(app, ["rescore", str(run)])
    assert shown.exit_code == 2, shown.output  # before the fix: 0, "0 rewards changed, 0 diverged"
    assert "episode 000000 of" in shown.output and "MAC does not match" in shown.output
    assert "--regrade" in shown.output  # what to do instead
    replayed = cli.invoke(app, ["replay", str(run), "--episode", "0"])
    assert replayed.exit_code == 2, replayed.output  # before the fix: 0, reward 1.000
    assert "episode 000000 of" in replayed.output and "MAC does not match" in replayed.output


def test_a_spliced_grade_does_not_verify_even_when_sealed(
    batches: tuple[Path, Episode, Path, Episode],
) -> None:
    """Past the MAC (sealed with the right key, as if it leaked): the spliced grader report was signed
    with a nonce derived for another episode and another submission, so it does not verify."""
    _, honest, _, wrong = batches
    forged = splice(honest, wrong)
    assert forged.recording is not None
    # the forger also claims the wrong answer's context for the nonce (else the replay diverges there)
    calls = [
        next(c for c in wrong.recording.calls if c.method == "secret") if c.method == "secret" else c  # type: ignore[union-attr]
        for c in forged.recording.calls
    ]
    forged = forged.model_copy(update={"recording": forged.recording.model_copy(update={"calls": calls})})
    kwargs = {"task": task_id()}
    report = asyncio.run(replay_episode(seal.seal(forged, kwargs, seal.load_key()), env_kwargs=kwargs))
    # none of the honest grade's signed lines verifies under the nonce derived for this episode: the
    # grader reads as never having started, and no reward comes out of the splice
    assert report.reward is None and report.divergence is not None
    assert "the grader did not start" in report.divergence.got


def test_the_grader_nonce_is_never_recorded(batches: tuple[Path, Episode, Path, Episode]) -> None:
    """The grader's stdin is kept with a placeholder where its nonce was, and no draw holds key bytes."""
    _, honest, _, _ = batches
    assert honest.recording is not None
    (grade,) = [c for c in honest.recording.calls if c.method == "exec"]
    assert grade.input["stdin"]["head"].startswith('{"nonce": "<secret 0>"')
    drawn = [c for c in honest.recording.calls if c.kind == "entropy"]
    assert [c.output for c in drawn if c.method == "secret"] == [None]
    assert all(c.input <= 8 for c in drawn if c.method == "token_bytes")  # canary names only


# -- edits the seal refuses -----------------------------------------------------------------------------


def test_an_edited_stored_reward_is_refused(batches: tuple[Path, Episode, Path, Episode]) -> None:
    _, _, run, wrong = batches
    components = {**wrong.reward_components, "all_passed": 1.0}
    rewrite(run, wrong.model_copy(update={"reward": 1.0, "reward_components": components}))
    shown = cli.invoke(app, ["rescore", str(run)])
    assert shown.exit_code == 2, shown.output
    assert "episode 000000 of" in shown.output and "MAC does not match" in shown.output


def test_an_edited_recording_is_refused(batches: tuple[Path, Episode, Path, Episode]) -> None:
    _, _, run, wrong = batches
    assert wrong.recording is not None
    calls = [
        c.model_copy(update={"output": {**c.output, "stdout": ""}}) if c.method == "exec" else c
        for c in wrong.recording.calls
    ]
    rewrite(run, wrong.model_copy(update={"recording": wrong.recording.model_copy(update={"calls": calls})}))
    shown = cli.invoke(app, ["replay", str(run), "--episode", "000000"])
    assert shown.exit_code == 2, shown.output
    assert "episode 000000 of" in shown.output and "MAC does not match" in shown.output


def test_a_recording_without_a_seal_or_under_another_key_is_refused(
    batches: tuple[Path, Episode, Path, Episode], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, honest, run, wrong = batches
    assert wrong.recording is not None
    rewrite(run, wrong.model_copy(update={"recording": wrong.recording.model_copy(update={"mac": None})}))
    shown = cli.invoke(app, ["rescore", str(run)])
    assert shown.exit_code == 2 and "carries no MAC" in shown.output, shown.output
    monkeypatch.setenv(seal.KEY_FILE_ENV, str(tmp_path / "another.key"))
    with pytest.raises(seal.RecordingKeyError, match="no recording key at"):
        asyncio.run(replay_episode(honest, env_kwargs={"task": task_id()}))
    seal.load_key()  # made now: a key, but not the one that sealed the episode
    with pytest.raises(seal.UnsealedRecording, match="MAC does not match"):
        asyncio.run(replay_episode(honest, env_kwargs={"task": task_id()}))


def test_other_env_options_are_refused(batches: tuple[Path, Episode, Path, Episode]) -> None:
    """The batch's options are sealed too: the same actions against another task do not replay."""
    _, honest, _, _ = batches
    with pytest.raises(seal.UnsealedRecording, match="MAC does not match"):
        asyncio.run(replay_episode(honest, env_kwargs={"task": "shift-01"}))
    report = asyncio.run(replay_episode(honest, env_kwargs={"task": task_id()}))  # the honest one replays
    assert report.divergence is None and report.reward == 1.0


# -- rescore --regrade: the graders run again, for real --------------------------------------------------


def test_regrade_gives_the_fresh_reward_of_an_episode_whose_recorded_grade_was_wrong(
    batches: tuple[Path, Episode, Path, Episode],
) -> None:
    honest_run, honest, run, wrong = batches
    rewrite(run, splice(honest, wrong))  # stored: reward 1.0, from a grade that was not its own
    shown = cli.invoke(app, ["rescore", str(run), "--regrade"])
    assert shown.exit_code == 0, shown.output
    assert "1 episodes regraded in real sandboxes: 1 rewards differ from the stored ones" in shown.output
    row = next(line for line in shown.output.splitlines() if "000000" in line)
    assert "1.000" in row and "0.000" in row and "FAILS" in row, row  # stored, fresh, its seal
    assert "all_passed 1.000→0.000" in shown.output
    honest_shown = cli.invoke(app, ["rescore", str(honest_run), "--regrade"])
    assert honest_shown.exit_code == 0, honest_shown.output
    assert "0 rewards differ from the stored ones" in honest_shown.output


def test_rescore_help_says_it_rescores_the_recorded_grader_outputs() -> None:
    shown = cli.invoke(app, ["rescore", "--help"], env={"COLUMNS": "200"})
    assert "recorded grader outputs" in shown.output and "--regrade" in shown.output


# -- the key ------------------------------------------------------------------------------------------


def test_the_key_is_made_once_with_mode_0600(recording_key: Path) -> None:
    assert not recording_key.exists()
    key = seal.load_key()
    assert stat.S_IMODE(recording_key.stat().st_mode) == 0o600
    assert seal.load_key() == key and len(key) == 32
    os.chmod(recording_key, 0o644)
    with pytest.raises(seal.RecordingKeyError, match="chmod 600"):
        seal.load_key()


def test_the_default_key_lives_in_the_users_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(seal.KEY_FILE_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert seal.recording_key_path() == tmp_path / "xdg" / "envhub" / "recording.key"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert seal.recording_key_path() == tmp_path / "home" / ".config" / "envhub" / "recording.key"


def test_a_key_inside_the_batch_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    monkeypatch.setenv(seal.KEY_FILE_ENV, str(run / "recording.key"))
    with pytest.raises(seal.RecordingKeyError, match="inside the batch folder"):
        record(run, load_policy("oracle"))
    assert not list(run.glob("shard-*"))


def test_the_seal_covers_what_the_store_reads_back(batches: tuple[Path, Episode, Path, Episode]) -> None:
    """Every field the MAC covers comes back from Parquet as it was sealed (the honest ones verify),
    and each of them, changed, breaks it."""
    _, honest, _, _ = batches
    kwargs, key = {"task": task_id()}, seal.load_key()
    assert seal.verify(honest, kwargs, key) is honest.recording
    assert honest.recording is not None
    call = honest.recording.calls[-1]
    edits: dict[str, Any] = {
        "episode_id": "000001",
        "seed": (honest.seed or 0) + 1,
        "reward": 0.5,
        "terminated": not honest.terminated,
        "turns": [honest.turns[0].model_copy(update={"reward": 0.5})],
        "recording": honest.recording.model_copy(
            update={"calls": [*honest.recording.calls[:-1], RecordedCall(**{**call.model_dump(), "turn": 2})]}
        ),
    }
    for field, value in edits.items():
        with pytest.raises(seal.UnsealedRecording):
            seal.verify(honest.model_copy(update={field: value}), kwargs, key)
