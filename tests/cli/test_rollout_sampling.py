"""The model policy is configured from the command line (issue 16.5): sampling settings reach the
server, `-n` tasks × `-r` rollouts give pass@k, and `OPENAI_BASE_URL` names the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envhub.cli import app
from envhub.policies import Sampling, TransformersPolicy, load_policy
from envhub.records import Episode
from envhub.rollout import summarize
from envhub.rollout.summary import pass_at_k
from envhub.store import read_episodes
from envhub.testing.openai_server import OpenAIServer, text

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    started = OpenAIServer.start()
    started.script(default=text("ok"))
    yield started
    started.stop()


def test_sampling_options_and_rollouts_per_task(server: OpenAIServer, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    policy = f"openai:{server.base_url}#fake-model"
    sampling = ["--temperature", "0.3", "--top-p", "0.9", "--max-tokens", "64", "--no-logprobs"]
    args = ["rollout", "arithmetic", "--policy", policy, "-n", "2", "-r", "3", *sampling]
    args += ["--tool-format", "text", "--out", str(out)]
    result = runner.invoke(app, args, env=WIDE)
    assert result.exit_code == 0, result.output
    bodies = [r["json"] for r in server.requests()]
    assert len(bodies) == 6
    for body in bodies:
        assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.3, 0.9, 64)
        assert "logprobs" not in body and "tools" not in body  # text tool format: tools are in the prompt
        assert "multiply" in body["messages"][0]["content"]
    assert [e.seed for e in read_episodes(out)] == [0, 0, 0, 1, 1, 1]
    assert "6 (2 tasks × 3)" in result.output
    assert "pass@1" in result.output and "pass@2" in result.output and "pass@3" in result.output


def test_a_resume_with_other_sampling_settings_is_refused(server: OpenAIServer, tmp_path: Path) -> None:
    args = ["rollout", "countdown", "--policy", f"openai:{server.base_url}#fake-model", "-n", "2"]
    args += ["--out", str(tmp_path / "batch")]
    assert runner.invoke(app, [*args, "--temperature", "0.3"], env=WIDE).exit_code == 0
    other = runner.invoke(app, [*args, "--temperature", "0.7", "--resume"], env=WIDE)
    assert other.exit_code == 2 and "temperature=0.3" in other.output and "temperature=0.7" in other.output
    more = runner.invoke(app, [*args, "--temperature", "0.3", "-r", "2", "--resume"], env=WIDE)
    assert more.exit_code == 2 and "rollouts=2" in more.output  # episode i would mean another task


def test_openai_base_url_names_the_server(server: OpenAIServer, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    args = [
        "rollout",
        "countdown",
        "--policy",
        "openai",
        "--model",
        "fake-model",
        "-n",
        "2",
        "--out",
        str(out),
    ]
    result = runner.invoke(app, args, env={**WIDE, "OPENAI_BASE_URL": server.base_url})
    assert result.exit_code == 0, result.output
    assert {r["json"]["model"] for r in server.requests()} == {"fake-model"}
    missing = runner.invoke(app, [*args[:-1], str(tmp_path / "other")], env={"OPENAI_BASE_URL": ""})
    assert missing.exit_code == 2 and "OPENAI_BASE_URL is not set" in missing.output


def test_sampling_settings_need_a_model_policy(tmp_path: Path) -> None:
    result = runner.invoke(app, ["rollout", "countdown", "--temperature", "0.5", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "the 'oracle' policy has no model" in result.output


def episode(seed: int, reward: float) -> Episode:
    return Episode(episode_id=f"{seed}-{reward}", env_id="e", seed=seed, policy="p", prompt=[], reward=reward)


def test_pass_at_k_is_the_unbiased_estimator_averaged_over_tasks() -> None:
    assert pass_at_k(4, 1, 1) == 0.25 and pass_at_k(4, 1, 2) == 0.5 and pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # any two of four with one failure include a solved one
    batch = [episode(0, r) for r in (1.0, 0.0, 0.0, 0.0)] + [episode(1, r) for r in (1.0, 1.0, 0.0, 0.0)]
    summary = summarize(batch)
    assert (summary.tasks, summary.rollouts) == (2, 4)
    assert summary.pass_at_k == {1: (0.25 + 0.5) / 2, 2: (0.5 + 5 / 6) / 2, 4: 1.0}
    assert summarize(batch[:4:2] + batch[4:5]).pass_at_k == {}  # task 1 has one rollout only


def test_the_hf_policy_takes_temperature_max_tokens_and_tool_format(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")  # a model directory; the model loads on first use
    sampling = Sampling(temperature=0.2, max_tokens=7, tool_format="text")
    policy = load_policy(f"hf:{tmp_path}", sampling=sampling)
    assert isinstance(policy, TransformersPolicy)
    assert (policy.temperature, policy.max_new_tokens, policy.tool_format) == (0.2, 7, "text")
    with pytest.raises(ValueError, match="not top_p"):
        load_policy(f"hf:{tmp_path}", sampling=Sampling(top_p=0.5))
