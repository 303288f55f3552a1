"""Every policy records what it was with every episode: the engine, and for a model the model and its
sampling settings, in `policy_info_json` and the model/sampling columns a batch folder has."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas
import pytest

from envhub.core import Action
from envhub.messages import Message
from envhub.policies import Policy, Sampling, load_policy
from envhub.rollout import rollout
from envhub.tools import ToolSpec

NO_SERVER = "openai:http://127.0.0.1:9/v1#Qwen/Qwen2.5-0.5B-Instruct"  # info() opens no connection


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny untrained chat model: what it answers does not matter here, what it records does."""
    from envhub.testing.tiny_model import tiny_chat_model

    return tiny_chat_model(tmp_path_factory.mktemp("tiny"))


def test_the_hf_policy_records_its_model_sampling_and_engine(model_dir: Path) -> None:
    sampling = Sampling(temperature=0.7, max_tokens=16, tool_format="text")
    info = load_policy(f"hf:{model_dir}", sampling=sampling).info()
    assert info["name"] == "hf" and info["engine"] == "transformers" and info["engine_version"]
    assert info["model"] == str(model_dir.resolve()) and info["model_type"] == "qwen2"
    assert (info["temperature"], info["max_tokens"], info["tool_format"]) == (0.7, 16, "text")
    assert (info["device"], info["seed"], info["chat_template_sha256"]) == ("cpu", None, None)


def test_the_openai_policy_records_its_server_model_sampling_and_engine() -> None:
    info = load_policy(NO_SERVER, sampling=Sampling(temperature=0.2, top_p=0.9, max_tokens=64)).info()
    assert info["engine"] == "openai-compatible HTTP" and info["base_url"] == "http://127.0.0.1:9/v1"
    assert (info["model"], info["temperature"], info["top_p"], info["max_tokens"]) == (
        "Qwen/Qwen2.5-0.5B-Instruct",
        0.2,
        0.9,
        64,
    )


def test_the_policies_without_a_model_record_what_plays_instead(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["42", {"role": "assistant", "content": "43"}]))
    assert load_policy("oracle").info() == {"name": "oracle", "engine": "reference solution"}
    assert load_policy("human").info() == {"name": "human", "engine": "terminal"}
    assert load_policy("random:7").info() == {
        "name": "random",
        "engine": "random",
        "seed": 7,
        "tool_probability": 0.5,
    }
    scripted = load_policy(f"scripted:{script}").info()
    assert (scripted["engine"], scripted["source"], scripted["actions"]) == ("script", str(script), 2)
    script.write_text(json.dumps(["42", "44"]))
    other = load_policy(f"scripted:{script}").info()["script_sha256"]
    assert other != scripted["script_sha256"]  # which script played, even after the file changed


class Bare(Policy):
    name = "bare"

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        return "0"


def test_a_policy_that_adds_nothing_still_records_its_class() -> None:
    assert Bare().info() == {"name": "bare", "engine": f"{__name__}.Bare"}


async def test_a_stored_batch_carries_the_hf_policys_record(model_dir: Path, tmp_path: Path) -> None:
    policy = load_policy(f"hf:{model_dir}", sampling=Sampling(temperature=0.5, max_tokens=4))
    try:
        await rollout("arithmetic", policy, episodes=1, out=tmp_path / "batch")
    finally:
        await policy.close()
    row: Any = pandas.read_parquet(tmp_path / "batch").iloc[0]
    recorded = policy.info()
    assert json.loads(row["policy_info_json"]) == json.loads(json.dumps(recorded))
    assert (row["model"], row["temperature"], row["max_tokens"]) == (recorded["model"], 0.5, 4)
