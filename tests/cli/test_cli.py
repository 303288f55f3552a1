"""The command line as a user meets it: tables, JSON, errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.store import read_episodes

runner = CliRunner()


def test_list_json_shows_index_and_installed_state() -> None:
    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0
    rows = {row["id"]: row for row in json.loads(result.output)}
    assert rows["arithmetic-v0"]["installed"] is True
    assert rows["arithmetic-v0"]["package"] == "envhub-games"
    assert "tool-use" in rows["arithmetic-v0"]["tags"]


def test_list_table() -> None:
    result = runner.invoke(app, ["list", "--all"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "guess-number-v0" in result.output and "envhub-games" in result.output


def test_info_shows_tools_options_and_provenance() -> None:
    result = runner.invoke(app, ["info", "arithmetic"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for expected in ("arithmetic-v0", "multiply: Multiply two integers.", "steps: 'int' = 3", "envhub-games"):
        assert expected in result.output


def test_unknown_env_is_one_clear_line_and_exit_code_2() -> None:
    result = runner.invoke(app, ["info", "arithmatic"])
    assert result.exit_code == 2
    assert "error: no environment 'arithmatic' is registered" in result.output
    assert "Traceback" not in result.output


def test_play_with_oracle_prints_the_conversation() -> None:
    result = runner.invoke(
        app, ["play", "guess-number", "--policy", "oracle", "--seed", "2"], env={"COLUMNS": "120"}
    )
    assert result.exit_code == 0
    assert "I am thinking of an integer" in result.output and "Correct!" in result.output
    assert "terminated after" in result.output and "seed 2" in result.output


def test_play_as_human_reads_stdin() -> None:
    result = runner.invoke(app, ["play", "guess-number", "--seed", "2", "--kwarg", "high=2"], input="1\n2\n")
    assert result.exit_code == 0
    assert "Correct!" in result.output


def test_rollout_prints_summary_and_writes_a_batch(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    result = runner.invoke(
        app,
        [
            "rollout",
            "countdown",
            "--episodes",
            "6",
            "--concurrency",
            "3",
            "--out",
            str(out),
            "--shard-size",
            "4",
        ],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    assert "solved (return ≥ 1)" in result.output and "100.0%" in result.output
    assert sorted(p.name for p in out.glob("*.parquet")) == ["shard-00000.parquet", "shard-00001.parquet"]
    episodes = read_episodes(out)
    assert [e.episode_id for e in episodes] == [f"{i:06d}" for i in range(6)]
    assert all(e.reward == 1.0 for e in episodes)


def test_rollout_refuses_to_overwrite_and_resumes_to_a_larger_batch(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    args = ["rollout", "guess-number", "--policy", "random:1", "--out", str(out)]
    assert runner.invoke(app, [*args, "--episodes", "3"]).exit_code == 0
    again = runner.invoke(app, [*args, "--episodes", "5"])
    assert again.exit_code == 2 and "pass --resume to complete it" in again.output
    other = runner.invoke(app, [*args, "--episodes", "5", "--resume", "--seed", "9"])
    assert other.exit_code == 2 and "seed: stored 0, asked 9" in other.output
    resumed = runner.invoke(app, [*args, "--episodes", "5", "--resume"], env={"COLUMNS": "120"})
    assert resumed.exit_code == 0, resumed.output
    assert "this run: 2" in resumed.output
    assert [e.episode_id for e in read_episodes(out)] == [f"{i:06d}" for i in range(5)]


def test_show_summarizes_prints_an_episode_and_writes_html(tmp_path: Path) -> None:
    out = tmp_path / "batch"
    runner.invoke(app, ["rollout", "arithmetic", "--episodes", "4", "--out", str(out)])
    summary = runner.invoke(app, ["show", str(out)], env={"COLUMNS": "120"})
    assert summary.exit_code == 0 and "4 of 4 episodes (complete)" in summary.output
    one = runner.invoke(app, ["show", str(out), "--episode", "2"], env={"COLUMNS": "120"})
    assert one.exit_code == 0 and "episode 000002" in one.output
    assert "<tool_call>" in one.output and "<tool_response>" in one.output
    report = tmp_path / "report.html"
    assert runner.invoke(app, ["show", str(out), "--html", str(report)]).exit_code == 0
    assert "000003" in report.read_text()
    missing = runner.invoke(app, ["show", str(out), "--episode", "99"])
    assert missing.exit_code == 2 and "no episode '99'" in missing.output
    nothing = runner.invoke(app, ["show", str(tmp_path)])
    assert nothing.exit_code == 2 and "holds no envhub batch" in nothing.output


def test_rollout_bad_kwarg_and_bad_option_are_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a batch without --out goes under runs/ here
    result = runner.invoke(app, ["rollout", "arithmetic", "--kwarg", "steps"])
    assert result.exit_code == 2 and "expected KEY=VALUE for --kwarg" in result.output
    # Types are checked before the batch; a value the constructor refuses fails every episode, which
    # fails the batch with the constructor's own words.
    result = runner.invoke(
        app, ["rollout", "arithmetic", "-n", "2", "--kwarg", "steps=0"], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 1 and "steps must be at least 1" in result.output
