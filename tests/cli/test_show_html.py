"""`envhub show RUN --episode N --html FILE`, as the README gives it, prints the episode and writes the
report (issue 31.1: it printed the episode and wrote nothing, silently)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from envhub.cli import app

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def test_show_with_episode_and_html_prints_the_episode_and_writes_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # the README's relative paths, runs/countdown and runs/countdown.html
    made = runner.invoke(
        app, ["rollout", "countdown", "--policy", "oracle", "--episodes", "4", "--out", "runs/countdown"]
    )
    assert made.exit_code == 0, made.output
    shown = runner.invoke(
        app, ["show", "runs/countdown", "--episode", "3", "--html", "runs/countdown.html"], env=WIDE
    )
    assert shown.exit_code == 0, shown.output
    assert "episode 000003" in shown.output  # the episode, turn by turn
    report = tmp_path / "runs" / "countdown.html"
    assert report.is_file(), shown.output
    html = report.read_text()
    assert all(f"00000{i}" in html for i in range(4))  # the whole batch, as without --episode
    expected = "report written to runs/countdown.html (episode 000003: runs/countdown.html#000003)"
    assert expected in shown.output
