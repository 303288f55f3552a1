"""Policy specs for the command line: the model-backed ones, and clear errors for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from envhub.policies import SPECS, OpenAIPolicy, TransformersPolicy, load_policy


def test_openai_spec_splits_url_and_model_at_the_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    policy = load_policy("openai:http://localhost:8000/v1#Qwen/Qwen2.5-0.5B-Instruct:latest")
    assert isinstance(policy, OpenAIPolicy)
    assert policy.url == "http://localhost:8000/v1/chat/completions"
    assert policy.model == "Qwen/Qwen2.5-0.5B-Instruct:latest"
    assert policy._http.headers == {"Authorization": "Bearer sk-local"}


@pytest.mark.parametrize(
    "spec", ["openai:http://localhost:8000/v1", "openai:localhost:8000/v1#m", "openai:", "openai:#m"]
)
def test_bad_openai_specs_show_the_syntax(spec: str) -> None:
    with pytest.raises(ValueError, match="openai:BASE_URL#MODEL"):
        load_policy(spec)


def test_hf_spec_names_a_local_model_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    policy = load_policy(f"hf:{tmp_path}")
    assert isinstance(policy, TransformersPolicy)
    assert policy.model_dir == tmp_path


def test_bad_hf_specs_say_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="hf:MODEL_DIR"):
        load_policy("hf:")
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        load_policy(f"hf:{tmp_path / 'nowhere'}")


def test_unknown_specs_list_every_kind() -> None:
    with pytest.raises(ValueError, match="unknown policy") as caught:
        load_policy("vllm:foo")
    assert SPECS in str(caught.value)
    assert "openai:BASE_URL#MODEL" in SPECS and "hf:MODEL_DIR" in SPECS
