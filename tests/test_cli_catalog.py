"""`envhub list` and `envhub info` as a plugin author meets them (issue 16.8): a third-party env shows
its own description and tags, and `info` says what is rewarded and how much."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.scaffold import create_plugin
from tests.conftest import RunPython

runner = CliRunner()


@pytest.mark.slow
def test_list_describes_a_third_party_env_from_its_docstring_and_package(tmp_path: Path) -> None:
    plugin = create_plugin("word-reverse", tmp_path / "src")
    pyproject = plugin.root / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace("readme =", 'keywords = ["words", "tool-use"]\nreadme =', 1)
    )
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    installed = subprocess.run(
        [*pip, "--target", str(site), str(plugin.root)], capture_output=True, text=True, timeout=120
    )
    assert installed.returncode == 0, installed.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "envhub", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert listed.returncode == 0, listed.stderr
    row = {r["id"]: r for r in json.loads(listed.stdout)}["word-reverse-v0"]
    docstring = "Reverse a word with the `reverse` tool, then answer it: the smallest complete tool-use task."
    assert row["description"] == docstring
    assert sorted(row["tags"]) == ["tool-use", "words"]
    assert row["package"] == "envhub-word-reverse"


@pytest.mark.slow
def test_list_still_lists_a_plugin_that_fails_to_import(run_python: RunPython) -> None:
    listed = run_python("from envhub.cli import app; app(['list', '--json'])")
    assert listed.returncode == 0, listed.stderr
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    assert rows["broken-v0"]["installed"] is True and rows["broken-v0"]["description"] == ""


def test_info_lists_the_rewards_with_their_weights() -> None:
    result = runner.invoke(app, ["info", "arithmetic"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "exact × 1" in result.output
    assert "tool_calls × 0: Recorded for analysis, not rewarded" in result.output
