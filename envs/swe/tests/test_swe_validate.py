from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest
from envhub_swe.runtime import MINI_IMAGE
from typer.testing import CliRunner

from envhub.cli import app
from envhub.sandbox.workspace import image_present


def test_validate_swe_mini_local_gold_resolves_and_empty_does_not() -> None:
    result = CliRunner().invoke(app, ["swe", "validate", "--dataset", "swe-mini", "--runtime", "local"])
    assert result.exit_code == 0, result.output
    assert "12/12 valid" in result.output
    assert "mini__kvstore-1" in result.output and "mini__textkit-3" in result.output


@pytest.mark.skipif(
    not image_present(MINI_IMAGE),
    reason=f"no Docker engine with {MINI_IMAGE} (sandboxes/swe-mini/build.sh)",
)
def test_validate_swe_mini_docker() -> None:
    result = CliRunner().invoke(app, ["swe", "validate", "--dataset", "swe-mini", "--runtime", "docker"])
    assert result.exit_code == 0, result.output
    assert "12/12 valid" in result.output


def test_validate_reports_a_missing_dataset(tmp_path: object) -> None:
    result = CliRunner().invoke(
        app, ["swe", "validate", "--dataset", "swe-bench-lite", "--data", str(tmp_path)]
    )
    assert result.exit_code == 2 and "was not found" in result.output


def test_validate_shows_a_tampered_run_as_void_canary(tmp_path: Path) -> None:
    """A 'gold' patch whose code rewrites pytest's reports: its run is void, and the table says so."""
    from envhub_swe.data import load_mini, select
    from envhub_swe.runtime import mini_workspace
    from envhub_swe.validate import validate
    from test_swe_grader_attacks import REPORTS_PASSED

    [row] = select(load_mini(), instance="mini__stats-2")
    repo = tmp_path / "repo"
    shutil.copytree(mini_workspace(row), repo)
    with (repo / "stats" / "__init__.py").open("a") as module:
        module.write(REPORTS_PASSED)
    hack = subprocess.run(["git", "diff"], cwd=repo, capture_output=True, text=True, check=True).stdout
    [result] = asyncio.run(validate([row.model_copy(update={"patch": hack})], dataset="swe-mini"))
    assert not result.gold_resolved and result.canary == "void: canary"
    assert "void: canary" in result.gold_summary
