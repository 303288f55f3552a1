"""A failed batch must not look like a success (issue 16.2): exit 1 above the error-rate threshold with
a one-line reason, and `--resume --retry-errors` plays exactly the failed episodes again."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.store import read_episodes
from envhub.testing.openai_server import OpenAIServer, status, text

runner = CliRunner()
WIDE = {"COLUMNS": "400"}  # the reason stays on one line


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    started = OpenAIServer.start()
    yield started
    started.stop()


def closed_port() -> int:
    """A port nothing listens on: bound, read, and released."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: ")]


@pytest.mark.slow
def test_an_unreachable_server_fails_the_batch_with_one_line(tmp_path: Path) -> None:
    policy = f"openai:http://127.0.0.1:{closed_port()}/v1#m"
    args = ["rollout", "countdown", "--episodes", "2", "--retries", "0", "--policy", policy]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "b")], env=WIDE)
    assert result.exit_code == 1, result.output
    (reason,) = error_lines(result.output)
    assert "2 of 2 episodes failed (policy_error: 2), more than --max-error-rate 0.1" in reason
    assert "could not be reached" in reason and "--resume --retry-errors" in reason


def test_the_threshold_is_a_flag(tmp_path: Path) -> None:
    script = tmp_path / "one.json"
    script.write_text('["not a number"]')  # the game asks again, the script has no more: a policy error
    args = ["rollout", "guess-number", "--episodes", "3", "--retries", "0", "--policy", f"scripted:{script}"]
    failing = runner.invoke(app, [*args, "--out", str(tmp_path / "a")], env=WIDE)
    assert failing.exit_code == 1 and len(error_lines(failing.output)) == 1, failing.output
    tolerated = runner.invoke(app, [*args, "--out", str(tmp_path / "b"), "--max-error-rate", "1"], env=WIDE)
    assert tolerated.exit_code == 0, tolerated.output


def test_retry_errors_plays_the_failed_episodes_again_and_only_them(
    server: OpenAIServer, tmp_path: Path
) -> None:
    out = tmp_path / "batch"
    args = ["rollout", "countdown", "--policy", f"openai:{server.base_url}#fake-model", "--out", str(out)]
    args += ["--retries", "0"]
    server.script(default=text("ok"))
    assert runner.invoke(app, [*args, "--episodes", "2"], env=WIDE).exit_code == 0
    first = {e.episode_id: e for e in read_episodes(out)}

    server.script(default=status(400, {"error": {"message": "the model is overloaded", "code": 400}}))
    broken = runner.invoke(app, [*args, "--episodes", "4", "--resume"], env=WIDE)
    assert broken.exit_code == 1, broken.output
    assert "2 of 4 episodes failed" in error_lines(broken.output)[0]

    server.script(default=text("ok"))
    plain = runner.invoke(app, [*args, "--episodes", "4", "--resume"], env=WIDE)
    assert plain.exit_code == 1 and "this run: 0" in plain.output  # a plain resume keeps what is stored

    retried = runner.invoke(app, [*args, "--episodes", "4", "--resume", "--retry-errors"], env=WIDE)
    assert retried.exit_code == 0, retried.output
    assert "this run: 2" in retried.output and "played again 2 episodes" in retried.output
    episodes = read_episodes(out)
    assert [e.episode_id for e in episodes] == ["000000", "000001", "000002", "000003"]
    assert all(e.error is None for e in episodes)
    assert all(first[e.episode_id] == e for e in episodes[:2])  # the good ones were not played again
    assert len(server.requests()) == sum(len(e.turns) for e in episodes[2:])


def test_retry_errors_needs_resume(tmp_path: Path) -> None:
    result = runner.invoke(app, ["rollout", "countdown", "--out", str(tmp_path), "--retry-errors"])
    assert result.exit_code == 2 and "it needs --out and --resume" in result.output
