"""`envhub rollout` without `--policy` plays the oracle and says so, before and after the batch (issue
31.10: a newcomer's first run reported 100% solved without saying why)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from envhub.cli import app
from envhub.cli.rollout import DEFAULT_POLICY_NOTE
from envhub.policies import SPECS
from envhub.store import load_manifest

runner = CliRunner()
WIDE = {"COLUMNS": "400"}


def test_rollout_without_a_policy_says_loudly_that_the_oracle_plays(tmp_path: Path) -> None:
    result = runner.invoke(app, ["rollout", "countdown", "-n", "2", "--out", str(tmp_path / "a")], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "note: no --policy given, so the oracle plays: the env's own reference solution" in result.stderr
    assert SPECS in result.stderr  # the choices, from the policies' own list
    assert "note: played by the oracle (no --policy given)" in result.stderr
    manifest = load_manifest(tmp_path / "a")
    assert manifest is not None and manifest.spec.policy == "oracle"  # the same batch as --policy oracle


def test_rollout_with_a_policy_is_quiet_about_it(tmp_path: Path) -> None:
    args = ["rollout", "countdown", "-n", "2", "--policy", "oracle", "--out", str(tmp_path / "b")]
    result = runner.invoke(app, args, env=WIDE)
    assert result.exit_code == 0, result.output
    assert DEFAULT_POLICY_NOTE not in result.stderr and "note:" not in result.output
