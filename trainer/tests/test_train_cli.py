"""`envhub train`, `envhub train --plot` and `envhub report` on a two-step run of the tiny model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from typer.testing import CliRunner

from envhub.cli import app


def test_the_cli_does_not_import_torch() -> None:
    """`envhub --help` lists the trainer's plugin commands without loading torch (seconds per call)."""
    code = (
        "import sys; from typer.testing import CliRunner; from envhub.cli import app; "
        "out = CliRunner().invoke(app, ['--help']).output; "
        "print('train' in out and 'report' in out, 'torch' in sys.modules)"
    )
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert listed.stdout.strip() == "True False", listed.stderr


def test_train_plot_and_report(tiny_model: Path, tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    options = {
        "model": str(tiny_model), "env_id": "guess-number", "max_turns": 2, "run_dir": "run", "steps": 2,
        "tasks_per_step": 2, "group_size": 2, "max_new_tokens": 4, "tensorboard": False,
    }  # fmt: skip
    config.write_text(yaml.safe_dump(options))
    runner = CliRunner()
    result = runner.invoke(app, ["train", str(config)])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "run"
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2
    result = runner.invoke(app, ["train", "--plot", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    result = runner.invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    page = (run_dir / "report.html").read_text()
    assert "<svg" in page and "Where the time went" in page and "guess" in page.lower()


def test_a_bad_config_is_a_readable_error(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("model: m\nenv_id: x\ngroup_sise: 4\n")
    result = CliRunner().invoke(app, ["train", str(config)])
    assert result.exit_code == 2
    assert "group_sise" in result.output
