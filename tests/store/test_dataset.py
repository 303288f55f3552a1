"""A batch folder is a Parquet dataset: standard readers take it as it is, rows in episode order, every
row ready for training (OpenAI messages, tool schemas, model and sampling settings), and TRL exports."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import datasets
import pandas
import pyarrow.dataset
import pytest

from envhub.messages import Message, ToolCall
from envhub.records import Episode, EpisodeError, Turn, episode_id
from envhub.report import write_html_report
from envhub.store import (
    MANIFEST,
    SCHEMA_VERSION,
    BatchSpec,
    BatchStore,
    export_trl,
    load_manifest,
    read_episodes,
)
from envhub.store.batch_store import HELD_SHARDS
from envhub.tools import ToolSpec

SPEC = BatchSpec(env_id="arithmetic-v0", env_kwargs={"digits": 3}, policy="openai:http://x/v1#m", seed=0)
ADD = ToolSpec(
    name="add",
    description="Add two integers.",
    parameters={"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
)
SETTINGS = {"name": "openai", "model": "Qwen/Qwen2.5-0.5B-Instruct", "temperature": 0.7, "top_p": 0.9}
V1_BATCH = Path(__file__).parents[1] / "data" / "store-v1"
"""A folder written by the store of schema version 1 (before this layout): episodes 1 and 0 in one
shard (in the order they finished), episode 3 left in its journal as by `kill -9`; 5 requested."""


def episode(index: int, *, error: bool = False, seed: int | None = None) -> Episode:
    call = ToolCall(id=f"c{index}", name="add", arguments='{"a": 1, "b": 2}')
    return Episode(
        episode_id=episode_id(index),
        env_id="arithmetic-v0",
        seed=index if seed is None else seed,
        policy="openai",
        policy_info={**SETTINGS, "max_tokens": 64},
        tools=[ADD],
        prompt=[Message(role="system", content="Be exact."), Message(role="user", content="1 + 2?")],
        turns=[
            Turn(
                index=0,
                action=Message(role="assistant", content="calling", tool_calls=[call]),
                observation=[Message(role="tool", content="3", tool_call_id=f"c{index}", name="add")],
                reward=0.0,
            ),
            Turn(index=1, action=Message(role="assistant", content="3"), observation=[], reward=1.0),
        ],
        reward=1.0,
        terminated=True,
        error=EpisodeError(kind="env_error", message="sandbox died") if error else None,
    )


def ids(frame: pandas.DataFrame) -> list[str]:
    return [str(i) for i in frame["episode_id"]]


def hf_ids(root: Path, cache: Path) -> list[str]:
    loaded = datasets.load_dataset("parquet", data_dir=str(root), split="train", cache_dir=str(cache))
    return [str(i) for i in loaded["episode_id"]]


def test_pandas_pyarrow_and_hf_datasets_read_the_folder_as_it_is(tmp_path: Path) -> None:
    root = tmp_path / "batch"
    with BatchStore.open(root, SPEC, episodes=5, resume=False, shard_size=2) as store:
        for i in range(5):
            store.add(episode(i))
    report = write_html_report(read_episodes(root), root / "report.html", title="run")
    assert report == root / ".report.html"  # a report asked for inside the folder gets a hidden name
    expected = [episode_id(i) for i in range(5)]
    assert ids(pandas.read_parquet(root)) == expected
    assert ids(pyarrow.dataset.dataset(root).to_table().to_pandas()) == expected
    assert hf_ids(root, tmp_path / "hf-cache") == expected
    assert (root / MANIFEST).is_file() and not (root / "manifest.json").exists()


def test_a_killed_batch_is_a_readable_dataset_and_loses_nothing(tmp_path: Path) -> None:
    store = BatchStore.open(tmp_path, SPEC, episodes=6, resume=False, shard_size=2)
    for i in range(5):
        store.add(episode(i))  # no close(): as after kill -9; episode 4 waits in the journal
    assert ids(pandas.read_parquet(tmp_path)) == [episode_id(i) for i in range(4)]
    assert [e.episode_id for e in read_episodes(tmp_path)] == [episode_id(i) for i in range(5)]
    resumed = BatchStore.open(tmp_path, SPEC, episodes=6, resume=True, shard_size=2)
    assert resumed.remaining() == [5]
    resumed.add(episode(5))
    resumed.close()
    assert ids(pandas.read_parquet(tmp_path)) == [episode_id(i) for i in range(6)]


def test_rows_are_in_episode_order_whatever_order_episodes_finish_in(tmp_path: Path) -> None:
    store = BatchStore.open(tmp_path, SPEC, episodes=20, resume=False, shard_size=2)
    late = {0, 7, 12}  # stragglers, and episode 0 holds every later one back past HELD_SHARDS shards
    for i in [i for i in range(20) if i not in late]:
        store.add(episode(i))
    assert len(list(tmp_path.glob("shard-*.parquet"))) == (17 - HELD_SHARDS * 2) // 2 + 1  # held back no more
    for i in sorted(late, reverse=True):
        store.add(episode(i))
    store.close()
    assert ids(pandas.read_parquet(tmp_path)) == [episode_id(i) for i in range(20)]


def test_a_resume_fills_gaps_in_place(tmp_path: Path) -> None:
    with BatchStore.open(tmp_path, SPEC, episodes=8, resume=False, shard_size=2) as store:
        for i in (0, 1, 2, 4, 5, 6, 7):
            store.add(episode(i))  # episode 3 never finished (the time budget ran out, say)
    with BatchStore.open(tmp_path, SPEC, episodes=8, resume=True, shard_size=2) as store:
        assert store.remaining() == [3]
        store.add(episode(3))
    assert ids(pandas.read_parquet(tmp_path)) == [episode_id(i) for i in range(8)]
    manifest = load_manifest(tmp_path)
    assert manifest is not None and manifest.complete
    ranges = [(s.first_episode_id, s.last_episode_id) for s in manifest.shards]
    assert ranges == sorted(ranges) and all(a[1] < b[0] for a, b in itertools.pairwise(ranges))


def test_every_row_carries_openai_messages_tools_and_the_sampling_settings(tmp_path: Path) -> None:
    with BatchStore.open(tmp_path, SPEC, episodes=1, resume=False) as store:
        store.add(episode(0))
    row = pandas.read_parquet(tmp_path).iloc[0]
    messages = list(row["messages"])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    call = messages[2]["tool_calls"][0]
    assert (call["id"], call["type"], call["function"]["name"]) == ("c0", "function", "add")
    assert json.loads(call["function"]["arguments"]) == {"a": 1, "b": 2}
    assert (messages[3]["tool_call_id"], messages[3]["content"]) == ("c0", "3")
    assert messages[4]["tool_calls"] is None and messages[4]["content"] == "3"
    (tool,) = list(row["tools"])
    assert tool["type"] == "function" and tool["function"]["name"] == "add"
    assert json.loads(tool["function"]["parameters"]) == ADD.parameters
    assert (row["model"], row["temperature"], row["top_p"], row["max_tokens"]) == (
        "Qwen/Qwen2.5-0.5B-Instruct",
        0.7,
        0.9,
        64,
    )
    assert row["policy_spec"] == SPEC.policy and json.loads(row["env_kwargs_json"]) == {"digits": 3}
    assert read_episodes(tmp_path)[0].tools == [ADD]  # the record round-trips with its tools


def test_a_folder_of_the_old_layout_reads_and_resumes_into_the_new_one(tmp_path: Path) -> None:
    root = tmp_path / "old"
    shutil.copytree(V1_BATCH, root)
    assert [e.episode_id for e in read_episodes(root)] == ["000000", "000001", "000003"]
    old_spec = load_manifest(root).spec  # type: ignore[union-attr]
    with BatchStore.open(root, old_spec, episodes=5, resume=True, shard_size=2) as store:
        assert store.remaining() == [2, 4]
        for i in (2, 4):
            store.add(episode(i))
    assert not (root / "manifest.json").exists() and not (root / "journal.jsonl").exists()
    assert load_manifest(root).schema_version == SCHEMA_VERSION  # type: ignore[union-attr]
    frame = pandas.read_parquet(root)
    assert ids(frame) == [episode_id(i) for i in range(5)]
    assert all(len(m) > 0 for m in frame["messages"])  # old rows got the new columns too


def test_forget_errors_lets_a_resume_rerun_exactly_the_failed_episodes(tmp_path: Path) -> None:
    store = BatchStore.open(tmp_path, SPEC, episodes=6, resume=False, shard_size=2)
    for i in range(6):
        store.add(episode(i, error=i in (1, 5)))  # 1 ends up in a shard, 5 waits in the journal
    assert store.forget_errors() == [1, 5]
    assert store.remaining() == [1, 5]
    store.close()
    with BatchStore.open(tmp_path, SPEC, episodes=6, resume=True, shard_size=2) as again:
        assert again.remaining() == [1, 5]
        for i in again.remaining():
            again.add(episode(i))
    episodes = read_episodes(tmp_path)
    assert [e.episode_id for e in episodes] == [episode_id(i) for i in range(6)]
    assert all(e.error is None for e in episodes)
    assert ids(pandas.read_parquet(tmp_path)) == [episode_id(i) for i in range(6)]


def test_export_for_trl_sft_and_grpo(tmp_path: Path) -> None:
    root = tmp_path / "batch"
    with BatchStore.open(root, SPEC, episodes=4, resume=False) as store:
        store.add(episode(0))
        store.add(episode(1, seed=0))  # a second rollout of the same task
        store.add(episode(2, error=True))
        store.add(episode(3).model_copy(update={"reward": 0.0}))
    sft = tmp_path / "sft.jsonl"
    assert export_trl(root, sft, kind="sft", min_reward=1.0) == 2  # the error and the failure left out
    rows = [json.loads(line) for line in sft.read_text().splitlines()]
    first = rows[0]
    assert first["tools"] == [ADD.to_openai()]
    assistant = first["messages"][2]
    assert assistant["tool_calls"] == [
        {"id": "c0", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    ]  # TRL's (and chat templates') tool calls carry arguments as objects
    assert first["messages"][3] == {"role": "tool", "content": "3", "tool_call_id": "c0", "name": "add"}
    grpo = tmp_path / "grpo.jsonl"
    assert export_trl(root, grpo, kind="grpo") == 2  # seeds 0 and 3: one prompt per distinct task
    prompts = [json.loads(line) for line in grpo.read_text().splitlines()]
    assert prompts[0] == {
        "prompt": [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "1 + 2?"}],
        "env_id": "arithmetic-v0",
        "seed": 0,
    }
    loaded = datasets.load_dataset("json", data_files=str(sft), split="train", cache_dir=str(tmp_path / "c"))
    assert loaded[0]["messages"][2]["tool_calls"][0]["function"]["name"] == "add"
    with pytest.raises(ValueError, match="choose 'sft'"):
        export_trl(root, sft, kind="dpo")  # type: ignore[arg-type]


async def test_a_rollout_stores_the_tool_schemas_the_policy_saw(tmp_path: Path) -> None:
    """The runner fills the `tools` column from the env: arithmetic's calculator tools, by name."""
    import pandas as pd

    from envhub import make
    from envhub.policies import OraclePolicy
    from envhub.rollout import plan, rollout

    await rollout("arithmetic", OraclePolicy(), episodes=plan(1, seed=0), out=tmp_path / "batch")
    (row,) = pd.read_parquet(tmp_path / "batch").to_dict("records")
    names = sorted(tool["function"]["name"] for tool in row["tools"])
    assert names == sorted(t.name for t in make("arithmetic").tools) and names
