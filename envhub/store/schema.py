"""The Parquet schema of episode records, versioned, and the conversion of episodes to and from rows.

Messages are stored as structs rather than JSON strings so that pandas, Hugging Face `datasets` and
DuckDB users can query roles, tool calls and rewards directly; a message whose content is a plain string
keeps it in `text`, a multi-part one (text and images) in `parts`, so records round-trip exactly.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from envhub.messages import ImagePart, Message, TextPart, ToolCall
from envhub.records import Episode, token_samples

SCHEMA_VERSION = 1

PART = pa.struct(
    [("type", pa.string()), ("text", pa.string()), ("data", pa.binary()), ("mime_type", pa.string())]
)
TOOL_CALL = pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())])
MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("text", pa.string()),
        ("parts", pa.list_(PART)),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("tool_call_id", pa.string()),
        ("name", pa.string()),
    ]
)
TOKENS = pa.struct(
    [
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("completion_token_ids", pa.list_(pa.int32())),
        ("completion_logprobs", pa.list_(pa.float64())),
        ("finish_reason", pa.string()),
        ("sample_break", pa.string()),
    ]
)
TURN = pa.struct(
    [
        ("index", pa.int32()),
        ("action", MESSAGE),
        ("observation", pa.list_(MESSAGE)),
        ("reward", pa.float64()),
        ("info_json", pa.string()),
        ("tokens", TOKENS),
    ]
)
SAMPLE = pa.struct(
    [
        ("token_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float64())),
        ("turn_indices", pa.list_(pa.int32())),
    ]
)
PROVENANCE = pa.struct(
    [
        ("package", pa.string()),
        ("package_version", pa.string()),
        ("entry_point", pa.string()),
        ("data_source", pa.string()),
        ("default_sandbox", pa.string()),
    ]
)

SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("env_id", pa.string()),
        ("env_version", pa.int32()),
        ("provenance", PROVENANCE),
        ("seed", pa.int64()),
        ("policy", pa.string()),
        ("policy_info_json", pa.string()),
        ("prompt", pa.list_(MESSAGE)),
        ("turns", pa.list_(TURN)),
        ("num_turns", pa.int32()),
        ("reward", pa.float64()),
        ("reward_components", pa.list_(pa.struct([("name", pa.string()), ("value", pa.float64())]))),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("error_kind", pa.string()),
        ("error_message", pa.string()),
        ("attempts", pa.int32()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("wall_seconds", pa.float64()),
        ("isolation_json", pa.string()),
        ("samples", pa.list_(SAMPLE)),
    ],
    metadata={"envhub.schema_version": str(SCHEMA_VERSION)},
)


def _message_row(message: Message) -> dict[str, Any]:
    parts = None
    if not isinstance(message.content, str):
        parts = [
            {"type": "text", "text": p.text, "data": None, "mime_type": None}
            if isinstance(p, TextPart)
            else {"type": "image", "text": None, "data": p.data, "mime_type": p.mime_type}
            for p in message.content
        ]
    return {
        "role": message.role,
        "text": message.content if isinstance(message.content, str) else None,
        "parts": parts,
        "tool_calls": [c.model_dump() for c in message.tool_calls],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
    }


def _message(row: dict[str, Any]) -> Message:
    content: str | list[TextPart | ImagePart]
    if row["parts"] is None:
        content = row["text"] or ""
    else:
        content = [
            TextPart(text=p["text"])
            if p["type"] == "text"
            else ImagePart(data=p["data"], mime_type=p["mime_type"])
            for p in row["parts"]
        ]
    return Message(
        role=row["role"],
        content=content,
        tool_calls=[ToolCall(**c) for c in row["tool_calls"] or []],
        tool_call_id=row["tool_call_id"],
        name=row["name"],
    )


def episode_row(episode: Episode) -> dict[str, Any]:
    """One Parquet row for an episode."""
    return {
        "episode_id": episode.episode_id,
        "env_id": episode.env_id,
        "env_version": episode.env_version,
        "provenance": episode.provenance.model_dump(),
        "seed": episode.seed,
        "policy": episode.policy,
        "policy_info_json": json.dumps(episode.policy_info),
        "prompt": [_message_row(m) for m in episode.prompt],
        "turns": [
            {
                "index": t.index,
                "action": _message_row(t.action),
                "observation": [_message_row(m) for m in t.observation],
                "reward": t.reward,
                "info_json": json.dumps(t.info, default=str),
                "tokens": t.tokens.model_dump() if t.tokens else None,
            }
            for t in episode.turns
        ],
        "num_turns": len(episode.turns),
        "reward": episode.reward,
        "reward_components": [{"name": k, "value": v} for k, v in episode.reward_components.items()],
        "terminated": episode.terminated,
        "truncated": episode.truncated,
        "error_kind": episode.error.kind if episode.error else None,
        "error_message": episode.error.message if episode.error else None,
        "attempts": episode.attempts,
        "started_at": episode.started_at,
        "wall_seconds": episode.wall_seconds,
        "isolation_json": json.dumps(episode.isolation) if episode.isolation is not None else None,
        "samples": [s.model_dump() for s in token_samples(episode.turns)],
    }


def episode_from_row(row: dict[str, Any]) -> Episode:
    """The Episode a row was written from (derived columns such as `samples` are recomputed on demand)."""
    error = {"kind": row["error_kind"], "message": row["error_message"]} if row["error_kind"] else None
    return Episode.model_validate(
        {
            "episode_id": row["episode_id"],
            "env_id": row["env_id"],
            "env_version": row["env_version"],
            "provenance": row["provenance"],
            "seed": row["seed"],
            "policy": row["policy"],
            "policy_info": json.loads(row["policy_info_json"] or "{}"),
            "prompt": [_message(m) for m in row["prompt"]],
            "turns": [
                {
                    "index": t["index"],
                    "action": _message(t["action"]),
                    "observation": [_message(m) for m in t["observation"]],
                    "reward": t["reward"],
                    "info": json.loads(t["info_json"] or "{}"),
                    "tokens": t["tokens"],
                }
                for t in row["turns"]
            ],
            "reward": row["reward"],
            "reward_components": {c["name"]: c["value"] for c in row["reward_components"]},
            "terminated": row["terminated"],
            "truncated": row["truncated"],
            "error": error,
            "attempts": row["attempts"],
            "started_at": row["started_at"],
            "wall_seconds": row["wall_seconds"],
            "isolation": json.loads(row["isolation_json"]) if row["isolation_json"] else None,
        }
    )


def episodes_table(episodes: list[Episode]) -> pa.Table:
    return pa.Table.from_pylist([episode_row(e) for e in episodes], schema=SCHEMA)
