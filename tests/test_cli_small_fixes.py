"""The smaller things a new user tripped on (issue 16.8): where a batch without --out goes, env options
checked before anything starts, the sandbox benchmark's table on an 80-column terminal, and the
bundled model's conversion needing only what the trainer declares."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

import envhub
from envhub.cli import app
from envhub.messages import Message
from envhub.sandbox.bench import Row, to_table
from envhub.store import read_episodes

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def test_a_rollout_without_out_goes_to_a_fresh_folder_under_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = runner.invoke(app, ["rollout", "countdown", "-n", "3"], env=WIDE)
    second = runner.invoke(app, ["rollout", "countdown", "-n", "2"], env=WIDE)
    assert first.exit_code == 0 and second.exit_code == 0, first.output + second.output
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all(f.name.startswith("countdown-v0-") for f in folders)
    assert sorted(len(read_episodes(f)) for f in folders) == [2, 3]
    for folder, result in zip(folders, sorted([first, second], key=lambda r: r.output), strict=True):
        assert f"storing the batch in runs/{folder.name}" in result.output


class Counted(envhub.SingleTurnEnv):
    """Counts its constructions: checking options must not make one."""

    made = 0

    def __init__(self, size: int = 3, label: str = "x") -> None:
        type(self).made += 1
        super().__init__()
        self.size, self.label = size, label

    def setup(self, rng: Any) -> str:
        return "say ok"

    def reference_action(self, messages: list[Message]) -> str:
        return "ok"

    @envhub.reward
    def said_ok(self, answer: str) -> float:
        return float(answer == "ok")


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    envhub.register("rc-counted-v0", Counted, override=True)
    Counted.made = 0
    return "rc-counted-v0"


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("size=big", "--kwarg size='big' does not fit rc-counted-v0: size is int"),
        ("label=7", "label is str"),
        (
            "colour=red",
            "rc-counted-v0 has no option 'colour'; its options: size: 'int' = 3, label: 'str' = 'x'",
        ),
    ],
)
def test_env_options_are_checked_against_the_constructor_without_making_an_env(
    counted: str, option: str, message: str
) -> None:
    result = runner.invoke(app, ["rollout", counted, "--kwarg", option], env=WIDE)
    assert result.exit_code == 2 and message in result.output, result.output
    assert Counted.made == 0
    assert not Path("runs").exists()  # refused before the store was opened


def test_good_env_options_pass_the_check(counted: str) -> None:
    result = runner.invoke(app, ["rollout", counted, "-n", "2", "--kwarg", "size=5"], env=WIDE)
    assert result.exit_code == 0, result.output


def test_the_sandbox_benchmark_table_is_readable_at_80_columns() -> None:
    rows = [
        Row("cold start", "cold start + `python -c pass` + close, p50", "ms", {}),
        Row("worker call", "persistent worker `run('pass')` round trip, p50", "ms", {}),
        Row("create+close", "sandboxes created + closed per second, 2 workers", "/s", {}),
    ]
    for row, value in zip(rows, (1234.56, 0.42, 98.7), strict=True):
        row.values = {"subprocess": value, "local": value * 3, "docker": value * 40}
    console = Console(width=80, record=True)
    console.print(to_table(rows))
    lines = console.export_text().splitlines()
    for row in rows:
        (line,) = [line for line in lines if line.startswith(f"│ {row.name}")]  # one line per metric
        assert all(f"{v:.2f}" in line for v in row.values.values()) and "3.00x" in line
        assert f"{row.name}: {row.metric}" in lines  # what it measures, in full, under the table


@pytest.mark.slow
def test_smollm2_converts_with_the_trainers_declared_dependencies(tmp_path: Path) -> None:
    """`smollm2_dir()` loads a GGUF file, which transformers does only with `accelerate`."""
    requirements = metadata.requires("envhub-trainer") or []
    assert any(r.startswith("accelerate") and "extra ==" not in r for r in requirements)
    target = tmp_path / "smollm2"
    code = f"import pathlib, envhub_trainer.models as m; m.smollm2_dir(pathlib.Path({str(target)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env={**os.environ}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (target / "config.json").exists() and (target / "tokenizer.json").exists()
