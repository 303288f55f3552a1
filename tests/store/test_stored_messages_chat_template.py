"""Stored rows go to a chat template as they are: tool-call `arguments` and tool `parameters` are JSON
values (Arrow's JSON type), which `datasets` reads as objects, so a template's `tojson` renders them
once, not as quoted JSON text. Batches written before (schema 2, JSON text) stay readable: `show`,
the TRL export, and `--resume`, which rewrites them in the current schema.

The template is Qwen2.5's, as TRL ships it, on a tokenizer built here (no download).
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import datasets
import pandas
import pytest
from transformers import AutoTokenizer
from trl.chat_template_utils import qwen2_5_chat_template
from typer.testing import CliRunner

from envhub.cli import app
from envhub.messages import Message, ToolCall
from envhub.records import Episode, Turn, episode_id
from envhub.store import SCHEMA_VERSION, BatchSpec, BatchStore, export_trl, load_manifest, read_episodes
from envhub.testing.tiny_model import tiny_chat_model
from envhub.tools import ToolSpec

V2_BATCH = Path(__file__).parents[1] / "data" / "store-v2"
"""A folder written by the store of schema version 2 (arguments and parameters as JSON text): episode 0
calls add with `{"a": 1, "b": 2}`, episode 1 with the malformed `{"a": 1, "b":`; 3 requested."""

ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
SPEC = BatchSpec(env_id="arithmetic-v0", env_kwargs={}, policy="scripted", seed=0)
CALL = '"arguments": {"a": 1, "b": 2}'
"""How a template's `tojson` renders the arguments when it is given an object."""


def episode(index: int, arguments: str = '{"a": 1, "b": 2}') -> Episode:
    call = ToolCall(id=f"c{index}", name="add", arguments=arguments)
    return Episode(
        episode_id=episode_id(index),
        env_id="arithmetic-v0",
        seed=index,
        policy="scripted",
        policy_info={"name": "scripted"},
        tools=[ADD],
        prompt=[Message(role="system", content="Be exact."), Message(role="user", content="1 + 2?")],
        turns=[
            Turn(
                index=0,
                action=Message(role="assistant", content="", tool_calls=[call]),
                observation=[Message(role="tool", content="3", tool_call_id=f"c{index}", name="add")],
                reward=0.0,
            ),
            Turn(index=1, action=Message(role="assistant", content="3"), observation=[], reward=1.0),
        ],
        reward=1.0,
        terminated=True,
        started_at=datetime(2026, 12, 4, tzinfo=UTC),
        wall_seconds=0.1,
    )


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = tiny_chat_model(tmp_path_factory.mktemp("qwen-template"), chat_template=qwen2_5_chat_template)
    return AutoTokenizer.from_pretrained(directory, local_files_only=True)


def rows(root: Path, cache: Path) -> list[dict[str, Any]]:
    """The batch as a user reads it for training: Hugging Face `datasets` on the Parquet folder."""
    loaded = datasets.load_dataset("parquet", data_dir=str(root), split="train", cache_dir=str(cache))
    return [dict(row) for row in loaded]


def render(tokenizer: Any, row: dict[str, Any]) -> str:
    text: str = tokenizer.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
    return text


def test_a_stored_row_renders_through_a_chat_template_as_it_is(tmp_path: Path, tokenizer: Any) -> None:
    root = tmp_path / "batch"
    with BatchStore.open(root, SPEC, episodes=2, resume=False) as store:
        store.add(episode(0))
        store.add(episode(1, arguments='{"a": 1, "b":'))  # a malformed call the model wrote
    good, malformed = rows(root, tmp_path / "cache")
    call = good["messages"][2]["tool_calls"][0]["function"]
    assert call["arguments"] == {"a": 1, "b": 2}
    assert good["tools"][0]["function"]["parameters"] == ADD.parameters
    text = render(tokenizer, good)
    assert CALL in text and '"arguments": "{' not in text  # once, not as quoted JSON text
    assert json.dumps(ADD.to_openai()) in text  # the tool schema as an object, as the model was shown it
    exported = tmp_path / "sft.jsonl"
    export_trl(root, exported, kind="sft")
    trl_row = json.loads(exported.read_text().splitlines()[0])
    assert render(tokenizer, trl_row) == text  # the stored row and TRL's export render alike
    broken = malformed["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert broken == '{"a": 1, "b":'  # text that is no JSON object stays the text the model wrote
    assert read_episodes(root)[1].turns[0].action.tool_calls[0].arguments == '{"a": 1, "b":'
    frame = pandas.read_parquet(root)  # pandas has no JSON dtype: JSON text, which json.loads reads
    assert json.loads(frame["messages"][0][2]["tool_calls"][0]["function"]["arguments"]) == {"a": 1, "b": 2}


def test_a_batch_of_schema_2_reads_shows_exports_and_resumes_into_objects(
    tmp_path: Path, tokenizer: Any
) -> None:
    root = tmp_path / "old"
    shutil.copytree(V2_BATCH, root)
    assert load_manifest(root).schema_version == 2  # type: ignore[union-attr]
    episodes = read_episodes(root)
    written = [e.turns[0].action.tool_calls[0].arguments for e in episodes]
    assert written == ['{"a": 1, "b": 2}', '{"a": 1, "b":']
    shown = CliRunner().invoke(app, ["show", str(root), "--episode", "0"])
    assert shown.exit_code == 0, shown.output
    assert '"a": 1' in shown.output
    exported = tmp_path / "sft.jsonl"
    assert export_trl(root, exported, kind="sft") == 2
    first = json.loads(exported.read_text().splitlines()[0])
    assert first["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"a": 1, "b": 2}
    with BatchStore.open(root, SPEC, episodes=3, resume=True) as store:
        assert store.remaining() == [2]
        store.add(episode(2))
    assert load_manifest(root).schema_version == SCHEMA_VERSION  # type: ignore[union-attr]
    stored = rows(root, tmp_path / "cache")
    assert [r["messages"][2]["tool_calls"][0]["function"]["arguments"] for r in stored] == [
        {"a": 1, "b": 2},
        '{"a": 1, "b":',
        {"a": 1, "b": 2},
    ]
    assert CALL in render(tokenizer, stored[0])
