"""Episode storage: exact round trips, the journal that survives a crash, resume without repeats."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from envhub.messages import ImagePart, Message, TextPart, ToolCall
from envhub.policies import TokenTrace
from envhub.records import Episode, EpisodeError, Turn, episode_id, token_samples
from envhub.store import (
    JOURNAL,
    MANIFEST,
    SCHEMA_VERSION,
    BatchExistsError,
    BatchMismatchError,
    BatchSpec,
    BatchStore,
    load_manifest,
    read_episodes,
    to_hf_dataset,
    to_pandas,
)

SPEC = BatchSpec(env_id="arithmetic-v0", policy="oracle", seed=0)


def png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), "green").save(buffer, format="PNG")
    return buffer.getvalue()


def episode(index: int, *, tokens: bool = True) -> Episode:
    call = ToolCall(id="c0", name="add", arguments='{"a": 1, "b": 2}')
    trace = TokenTrace(
        prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5], completion_logprobs=[-0.5, -0.25]
    )
    second = TokenTrace(
        prompt_token_ids=[1, 2, 3, 4, 5, 6], completion_token_ids=[7], completion_logprobs=[-1.0]
    )
    return Episode(
        episode_id=episode_id(index),
        env_id="arithmetic-v0",
        env_version=0,
        seed=index,
        policy="oracle",
        policy_info={"name": "oracle", "temperature": 0.7},
        prompt=[Message(role="user", content=[TextPart(text="look"), ImagePart(data=png())])],
        turns=[
            Turn(
                index=0,
                action=Message(role="assistant", tool_calls=[call]),
                observation=[Message(role="tool", content="3", tool_call_id="c0", name="add")],
                reward=0.0,
                info={"turn": 1, "tool_calls": 1},
                tokens=trace if tokens else None,
            ),
            Turn(
                index=1,
                action=Message(role="assistant", content="3"),
                observation=[],
                reward=1.0,
                info={"turn": 2, "reward_components": {"exact": 1.0}},
                tokens=second if tokens else None,
            ),
        ],
        reward=1.0,
        reward_components={"exact": 1.0},
        terminated=True,
        wall_seconds=0.25,
        isolation={"network": "off (unshare-net)"},
    )


def test_round_trip_is_exact_including_images_tokens_and_errors(tmp_path: Path) -> None:
    failed = episode(1, tokens=False).model_copy(
        update={"error": EpisodeError(kind="env_error", message="sandbox died"), "attempts": 2}
    )
    originals = [episode(0), failed]
    with BatchStore.open(tmp_path, SPEC, episodes=2, resume=False) as store:
        for e in originals:
            store.add(e)
    assert read_episodes(tmp_path) == originals


def test_token_samples_join_extending_turns_and_split_on_drift() -> None:
    joined = token_samples(episode(0).turns)
    assert len(joined) == 1
    assert joined[0].token_ids == [1, 2, 3, 4, 5, 6, 7]
    assert joined[0].loss_mask == [0, 0, 0, 1, 1, 0, 1]
    assert joined[0].logprobs == [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, -1.0]
    assert joined[0].turn_indices == [0, 1]
    drifted = episode(0).turns
    drifted[1] = drifted[1].model_copy(
        update={"tokens": TokenTrace(prompt_token_ids=[1, 2, 9, 4, 5, 6], completion_token_ids=[7])}
    )
    split = token_samples(drifted)
    assert [s.token_ids for s in split] == [[1, 2, 3, 4, 5], [1, 2, 9, 4, 5, 6, 7]]
    assert [s.turn_indices for s in split] == [[0], [1]]
    flagged = episode(0).turns
    flagged[1] = flagged[1].model_copy(
        update={"tokens": flagged[1].tokens.model_copy(update={"sample_break": "template changed"})}  # type: ignore[union-attr]
    )
    assert len(token_samples(flagged)) == 2


def test_parquet_has_versioned_schema_and_trainer_columns(tmp_path: Path) -> None:
    with BatchStore.open(tmp_path, SPEC, episodes=1, resume=False) as store:
        store.add(episode(0))
    (shard,) = tmp_path.glob("shard-*.parquet")
    table = pq.read_table(shard)
    assert table.schema.metadata[b"envhub.schema_version"] == str(SCHEMA_VERSION).encode()
    row = table.to_pylist()[0]
    assert row["samples"][0]["loss_mask"] == [0, 0, 0, 1, 1, 0, 1]
    assert row["turns"][0]["action"]["tool_calls"][0]["name"] == "add"
    assert row["prompt"][0]["parts"][1]["data"] == png()
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["schema_version"] == SCHEMA_VERSION and manifest["complete"] is True


def test_pandas_and_hf_datasets_read_the_batch(tmp_path: Path) -> None:
    with BatchStore.open(tmp_path, SPEC, episodes=3, resume=False, shard_size=2) as store:
        for i in range(3):
            store.add(episode(i))
    frame = to_pandas(tmp_path)
    assert list(frame["episode_id"]) == ["000000", "000001", "000002"]
    assert frame["reward"].tolist() == [1.0, 1.0, 1.0]
    dataset = to_hf_dataset(tmp_path)
    assert len(dataset) == 3
    assert dataset[1]["turns"][0]["action"]["tool_calls"][0]["arguments"] == '{"a": 1, "b": 2}'


def test_unflushed_episodes_survive_a_crash_in_the_journal(tmp_path: Path) -> None:
    store = BatchStore.open(tmp_path, SPEC, episodes=10, resume=False, shard_size=100)
    for i in range(4):
        store.add(episode(i))
    with (tmp_path / JOURNAL).open("a") as journal:
        journal.write('{"episode_id": "000009", "env_')  # the process died mid-write
    # no close(): as after kill -9. Readers already see every finished episode.
    assert [e.episode_id for e in read_episodes(tmp_path)] == [episode_id(i) for i in range(4)]
    resumed = BatchStore.open(tmp_path, SPEC, episodes=10, resume=True, shard_size=100)
    assert resumed.remaining() == list(range(4, 10))
    resumed.close()
    assert not (tmp_path / JOURNAL).exists()
    assert load_manifest(tmp_path).episodes_done == 4  # type: ignore[union-attr]
    assert [e.episode_id for e in read_episodes(tmp_path)] == [episode_id(i) for i in range(4)]


def test_crash_between_shard_and_journal_truncation_stores_nothing_twice(tmp_path: Path) -> None:
    store = BatchStore.open(tmp_path, SPEC, episodes=4, resume=False, shard_size=2)
    store.add(episode(0))
    journal_before_shard = (tmp_path / JOURNAL).read_text() + episode(1).model_dump_json() + "\n"
    store.add(episode(1))  # writes a shard and truncates the journal
    (tmp_path / JOURNAL).write_text(journal_before_shard)  # as if truncation never happened
    (tmp_path / ".shard-00001.parquet.tmp").write_bytes(b"half a shard")
    resumed = BatchStore.open(tmp_path, SPEC, episodes=4, resume=True, shard_size=2)
    assert resumed.remaining() == [2, 3]
    resumed.close()
    assert [e.episode_id for e in read_episodes(tmp_path)] == ["000000", "000001"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_existing_batch_needs_resume_and_the_same_settings(tmp_path: Path) -> None:
    BatchStore.open(tmp_path, SPEC, episodes=1, resume=False).close()
    with pytest.raises(BatchExistsError, match="pass --resume to complete it"):
        BatchStore.open(tmp_path, SPEC, episodes=1, resume=False)
    other = SPEC.model_copy(update={"policy": "random:3", "env_kwargs": {"steps": 2}})
    with pytest.raises(
        BatchMismatchError, match=r"env_kwargs: stored \{\}, asked \{'steps': 2\}, policy: stored"
    ):
        BatchStore.open(tmp_path, other, episodes=1, resume=True)


def test_non_empty_directory_without_manifest_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(BatchExistsError, match="is not empty and holds no envhub batch"):
        BatchStore.open(tmp_path, SPEC, episodes=1, resume=False)


def test_adding_a_stored_episode_twice_is_refused(tmp_path: Path) -> None:
    with BatchStore.open(tmp_path, SPEC, episodes=2, resume=False) as store:
        store.add(episode(0))
        with pytest.raises(ValueError, match="already stored"):
            store.add(episode(0))
