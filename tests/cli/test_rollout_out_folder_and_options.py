"""`envhub rollout` as a new user first meets it (issue 16.8): a batch without --out goes to a fresh folder
under runs/, and env options are checked against the constructor before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import envhub
from envhub.cli import app
from envhub.messages import Message
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
