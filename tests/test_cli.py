"""The command line as a user meets it: tables, JSON, errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from envhub.cli import app
from envhub.records import Episode

runner = CliRunner()


def test_list_json_shows_index_and_installed_state() -> None:
    result = runner.invoke(app, ["list", "--json"])
    assert result.exit_code == 0
    rows = {row["id"]: row for row in json.loads(result.output)}
    assert rows["arithmetic-v0"]["installed"] is True
    assert rows["arithmetic-v0"]["package"] == "envhub-games"
    assert "tool-use" in rows["arithmetic-v0"]["tags"]


def test_list_table() -> None:
    result = runner.invoke(app, ["list"], env={"COLUMNS": "200"})
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


def test_rollout_prints_summary_and_writes_records(tmp_path: Path) -> None:
    out = tmp_path / "episodes.jsonl"
    result = runner.invoke(
        app,
        ["rollout", "countdown", "--episodes", "6", "--concurrency", "3", "--out", str(out)],
        env={"COLUMNS": "120"},
    )
    assert result.exit_code == 0, result.output
    assert "solved (return ≥ 1)" in result.output and "100.0%" in result.output
    episodes = [Episode.model_validate_json(line) for line in out.read_text().splitlines()]
    assert len(episodes) == 6 and all(e.reward == 1.0 for e in episodes)


def test_rollout_bad_kwarg_and_bad_option_are_explained() -> None:
    result = runner.invoke(app, ["rollout", "arithmetic", "--kwarg", "steps"])
    assert result.exit_code == 2 and "expected KEY=VALUE for --kwarg" in result.output
    result = runner.invoke(app, ["rollout", "arithmetic", "--kwarg", "steps=0"])
    assert result.exit_code == 2 and "steps must be at least 1" in result.output
