"""`envhub list` and `envhub info` as a plugin author meets them (issue 16.8): a third-party env shows
its own description and tags, and `info` says what is rewarded and how much; ids grouped and filtered
by source, and `info`'s licence, requirements and last arrival check (issue 17)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envhub.checks import load_report, save_report
from envhub.cli import app
from envhub.cli.catalog import licence, requirements
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


def test_list_groups_ids_by_source_with_counts() -> None:
    rows = json.loads(runner.invoke(app, ["list", "--json"]).output)
    counts = Counter(row["package"] for row in rows)
    result = runner.invoke(app, ["list", "--all", "--unavailable"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # a source is a distribution, or `register() in MODULE` for ids other tests registered in this process
    titles = re.findall(r"^(\S.*?) · (\d+) ids?\s*$", result.output, flags=re.MULTILINE)
    assert titles == [(package, str(n)) for package, n in sorted(counts.items())]
    assert ("envhub-games", "3") in titles
    installed = sum(row["installed"] for row in rows)
    playable = sum(row["available"] for row in rows)
    last = result.output.strip().splitlines()[-1]
    sources = f"{len(counts)} sources"
    assert last == f"{len(rows)} environments from {sources}, {installed} installed, {playable} playable here"


@pytest.mark.parametrize("name", ["games", "envhub-games", "Envhub_Games"])
def test_list_source_keeps_one_distribution(name: str) -> None:
    result = runner.invoke(app, ["list", "--source", name, "--json"])
    assert result.exit_code == 0, result.output
    assert [row["id"] for row in json.loads(result.output)] == [
        "arithmetic-v0",
        "countdown-v0",
        "guess-number-v0",
    ]


def test_list_unknown_source_names_the_sources() -> None:
    result = runner.invoke(app, ["list", "--source", "gamez"])
    assert result.exit_code == 2
    assert "error: no source named 'gamez'; the sources are: " in result.output
    assert "envhub-games (3)" in result.output


def test_info_shows_licence_and_the_last_arrival_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVHUB_CHECKS_DIR", str(tmp_path))
    before = runner.invoke(app, ["info", "countdown"], env={"COLUMNS": "200"})
    assert before.exit_code == 0, before.output
    assert "Apache-2.0" in before.output
    assert "not run on this machine: envhub check countdown-v0" in before.output

    assert runner.invoke(app, ["check", "countdown", "--episodes", "1"]).exit_code == 0
    after = runner.invoke(app, ["info", "countdown"], env={"COLUMNS": "200"}).output
    assert "passed, oracle 1.00, random 0.00 (" in after and ", version 0.1.0)" in after

    report = load_report("countdown-v0")
    assert report is not None
    save_report(report.model_copy(update={"package_version": "0.0.9"}))
    stale = runner.invoke(app, ["info", "countdown"], env={"COLUMNS": "200"}).output
    assert "version 0.1.0 is installed now: envhub check countdown-v0" in stale


def test_requirements_name_the_installed_versions_and_licences_without_extras() -> None:
    found = requirements("envhub-core")
    assert f"pyarrow {metadata.version('pyarrow')} (Apache-2.0)" in found
    assert not any(line.startswith("torch ") for line in found)  # torch comes with an extra only
    assert requirements("envhub-games") == []  # it requires the core alone, which every plugin does


def fake_distribution(site: Path, name: str, *lines: str) -> None:
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "\n".join(["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0", *lines])
    )


def test_licence_reads_the_expression_then_the_classifiers_then_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_distribution(tmp_path, "lic-expr", "License-Expression: MIT", "Classifier: License :: Other")
    fake_distribution(
        tmp_path, "lic-classifier", "License: see file", "Classifier: License :: OSI Approved :: BSD"
    )
    fake_distribution(tmp_path, "lic-text", "License: Copyright 2024 Someone" + " and others" * 10)
    fake_distribution(tmp_path, "lic-none")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert licence("lic-expr") == "MIT"
    assert licence("lic-classifier") == "BSD"
    assert licence("lic-text") == ("Copyright 2024 Someone" + " and others" * 10)[:57] + "..."
    assert licence("lic-none") == "not declared in the distribution's metadata"
    assert licence("no-such-distribution") == "unknown (not installed)"
