"""Availability is data (issue 31.5 and 31.8): every id says whether it can be played here and why not,
in `list --json`, `info` and `check`; `list` hides the unplayable ones unless asked and by default
summarizes by source; `check` says "unavailable: ..." instead of failing a determinism check, shows
which check is running, and tables are not wrapped at 80 columns when piped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from envhub_textarena.games import unavailable
from typer.testing import CliRunner

from envhub.checks import check
from envhub.cli import app

runner = CliRunner()
WIDE = {"COLUMNS": "400"}
CODENAMES = "textarena/codenames-v0"  # needs NLTK's 'words' corpus, which the textarena wheel lacks


def test_every_id_in_list_json_says_whether_it_is_available_and_why_not() -> None:
    rows = json.loads(runner.invoke(app, ["list", "--json"]).stdout)
    assert all(isinstance(row["available"], bool) and "unavailable_reason" in row for row in rows)
    by_id = {row["id"]: row for row in rows}
    missing = unavailable()  # what the textarena plugin knows cannot run here
    assert len(missing) == 58
    for env_id, reason in missing.items():
        assert by_id[env_id]["available"] is False and by_id[env_id]["unavailable_reason"] == reason
    assert by_id["countdown-v0"]["available"] is True and by_id["countdown-v0"]["unavailable_reason"] is None
    assert "needs NLTK's 'words' corpus" in by_id[CODENAMES]["unavailable_reason"]


def test_list_hides_unplayable_ids_unless_asked() -> None:
    shown = runner.invoke(app, ["list", "--source", "textarena"], env=WIDE)
    assert shown.exit_code == 0, shown.output
    assert CODENAMES not in shown.stdout and "textarena/tic-tac-toe-v0" in shown.stdout
    assert "envhub-textarena · 180 ids (58 not playable here: --unavailable)" in shown.stdout
    asked = runner.invoke(app, ["list", "--source", "textarena", "--unavailable"], env=WIDE)
    assert CODENAMES in asked.stdout and "unavailable: needs NLTK's 'words' corpus" in asked.stdout


def test_list_by_default_is_a_summary_by_source_and_the_ids_with_all() -> None:
    rows = json.loads(runner.invoke(app, ["list", "--json"]).stdout)
    summary = runner.invoke(app, ["list"], env=WIDE)
    assert summary.exit_code == 0, summary.output
    assert "textarena/tic-tac-toe-v0" not in summary.stdout
    textarena = next(line for line in summary.stdout.splitlines() if "envhub-textarena" in line)
    assert [cell.strip() for cell in textarena.split("│")[2:5]] == ["238", "238", "180"]
    playable = sum(row["available"] for row in rows)
    assert (
        f"{len(rows)} environments from " in summary.stdout and f"{playable} playable here" in summary.stdout
    )
    everything = runner.invoke(app, ["list", "--all"], env=WIDE)
    assert "textarena/tic-tac-toe-v0" in everything.stdout and CODENAMES not in everything.stdout


def test_info_says_why_an_id_cannot_be_played_without_failing() -> None:
    result = runner.invoke(app, ["info", CODENAMES], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "no: needs NLTK's 'words' corpus" in result.stdout
    playable = runner.invoke(app, ["info", "countdown"], env=WIDE)
    assert playable.exit_code == 0 and "│ available       │ yes" in playable.stdout


def test_check_reports_unavailable_instead_of_a_failed_determinism_check(tmp_path: Path) -> None:
    report = check(CODENAMES)
    assert not report.available and not report.passed and not report.failures
    assert report.unavailable_reason is not None and report.unavailable_reason.startswith("needs NLTK")
    assert report.summary() == f"unavailable: {report.unavailable_reason}"
    result = runner.invoke(app, ["check", CODENAMES, "--no-save", "--json"], env=WIDE)
    assert result.exit_code == 1
    (dumped,) = json.loads(result.stdout)
    assert dumped["available"] is False and dumped["unavailable_reason"] == report.unavailable_reason
    assert f"unavailable: {CODENAMES}: needs NLTK's 'words' corpus" in result.stderr
    assert "reset determinism" not in result.stderr and "failed:" not in result.stderr


def test_check_says_which_check_of_which_id_is_running() -> None:
    started: list[str] = []
    assert check("countdown", episodes=1, on_check=started.append).passed
    assert started == ["reset determinism", "oracle reward", "random baseline", "store round trip"]
    result = runner.invoke(
        app, ["check", "countdown", "guess-number", "--episodes", "1", "--no-save"], env=WIDE
    )
    assert result.exit_code == 0, result.output
    assert "checking countdown-v0 (1 of 2): reset determinism (1 of 5)" in result.stderr
    assert "checking guess-number-v0 (2 of 2): store round trip (5 of 5)" in result.stderr


@pytest.mark.parametrize("command", [["list", "--all"], ["rollout", "--help"]])
def test_piped_output_is_not_wrapped_at_80_columns(command: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    piped = subprocess.run(
        [sys.executable, "-m", "envhub", *command], capture_output=True, text=True, env=env, timeout=120
    )
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    if command[0] == "list":  # one row per id, the whole description on it
        row = next(line for line in lines if "countdown-v0" in line)
        assert "Reach a target number with + - * / over given numbers, in one answer." in row
    else:  # each option's help on one line
        row = next(line for line in lines if line.startswith("│ --max-error-rate"))
        assert "Exit with status 1 when more of the batch's episodes failed." in row
    assert max(len(line) for line in lines) > 80
