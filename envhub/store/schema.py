"""The Parquet schema of episode records, versioned, and the conversion of episodes to and from rows.

Messages are stored as structs rather than JSON strings so that pandas, Hugging Face `datasets` and
DuckDB users can query roles, tool calls and rewards directly; a message whose content is a plain string
keeps it in `text`, a multi-part one (text and images) in `parts`, so records round-trip exactly.

Version 2 adds columns that make a row usable on its own for training: the whole conversation in the
OpenAI chat format (`messages`), the tool schemas the model was shown (`tools`), the model and sampling
settings, and what the batch was asked for (`policy_spec`, `env_kwargs_json`). They are derived from
the record and the batch spec, so reading a row back ignores them. docs/episodes.md lists every column.

Version 3 types tool-call `arguments` and tool `parameters` in those columns as Arrow's JSON extension
type (`arrow.json`): JSON has no fixed shape, which a Parquet column needs, so the values are JSON text
marked as JSON, and readers that know the mark give objects (Hugging Face `datasets` decodes them, so a
row goes to a chat template as it is, not double-encoded). Arguments that are not a JSON object (a
malformed call the model wrote) are stored as a JSON string of the text, so every value decodes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa

from envhub.messages import ImagePart, Message, TextPart, ToolCall
from envhub.records import Episode, token_samples
from envhub.store.batch_spec import BatchSpec
from envhub.tools import ToolSpec

SCHEMA_VERSION = 3

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
        ("lock_hash", pa.string()),  # envhub.lock; null in shards written before it (read back as None)
    ]
)


def _openai_types(json_type: pa.DataType) -> tuple[pa.DataType, pa.DataType]:
    """The `messages` and `tools` element types, with `json_type` where a value is any JSON.

    Built twice: with `pa.json_()` for the schema, and with its storage type (`pa.string()`) for
    `pa.Table.from_pylist`, which cannot build extension columns; the table is cast afterwards.
    """
    tool_call = pa.struct(
        [
            ("id", pa.string()),
            ("type", pa.string()),
            ("function", pa.struct([("name", pa.string()), ("arguments", json_type)])),
        ]
    )
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.list_(tool_call)),
            ("tool_call_id", pa.string()),
            ("name", pa.string()),
        ]
    )
    function = pa.struct([("name", pa.string()), ("description", pa.string()), ("parameters", json_type)])
    return message, pa.struct([("type", pa.string()), ("function", function)])


OPENAI_MESSAGE, OPENAI_TOOL = _openai_types(pa.json_())
"""A chat message as OpenAI's API writes it, but with tool-call `arguments` typed as JSON, and a tool in
OpenAI's format with its `parameters` schema typed as JSON; `content` is the text (images stay in
`prompt`/`turns`)."""


def _schema(json_type: pa.DataType) -> pa.Schema:
    openai_message, openai_tool = _openai_types(json_type)
    return pa.schema(
        [
            ("episode_id", pa.string()),
            ("env_id", pa.string()),
            ("env_version", pa.int32()),
            ("provenance", PROVENANCE),
            ("seed", pa.int64()),
            ("policy", pa.string()),
            ("policy_info_json", pa.string()),
            ("policy_spec", pa.string()),
            ("model", pa.string()),
            ("temperature", pa.float64()),
            ("top_p", pa.float64()),
            ("max_tokens", pa.int64()),
            ("env_kwargs_json", pa.string()),
            ("tools", pa.list_(openai_tool)),
            ("messages", pa.list_(openai_message)),
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
            # `envhub replay`'s tape; null when not recorded, and in older shards
            ("recording_json", pa.string()),
            # the forked-from episode's id (`--fork-at`); else null, as in older shards
            ("parent", pa.string()),
            # the turns it shares with its parent; null when not forked
            ("fork_turn", pa.int32()),
            # the Ray node that ran it; null for in-process runs and older shards
            ("node", pa.string()),
            # the backend its sandbox ran on, after failover; null if none
            ("sandbox_provider", pa.string()),
        ],
        metadata={"envhub.schema_version": str(SCHEMA_VERSION)},
    )


SCHEMA = _schema(pa.json_())
_STORAGE_SCHEMA = _schema(pa.string())


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


def json_arguments(raw: str) -> str:
    """Tool-call arguments as the `messages` column stores them: JSON that decodes to the object the
    model wrote, or to the text itself where that is not a JSON object (a malformed call)."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return json.dumps(raw)
    return raw if isinstance(value, dict) else json.dumps(raw)


def openai_message(message: Message) -> dict[str, Any]:
    """The `messages` column's form of a message: OpenAI's chat format with text content."""
    calls = [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": json_arguments(c.arguments)},
        }
        for c in message.tool_calls
    ]
    return {
        "role": message.role,
        "content": message.text,
        "tool_calls": calls or None,
        "tool_call_id": message.tool_call_id,
        "name": message.name,
    }


def _tool_row(tool: ToolSpec) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description, "parameters": json.dumps(tool.parameters)}
    return {"type": "function", "function": function}


def _tool(row: dict[str, Any]) -> ToolSpec:
    function = row["function"]
    return ToolSpec(
        name=function["name"],
        description=function["description"] or "",
        parameters=json.loads(function["parameters"] or "{}"),
    )


def _number(value: object) -> float | None:
    """A sampling setting as a number; anything else (absent, text) is unknown."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _settings(info: dict[str, Any]) -> dict[str, Any]:
    """The model and sampling columns, from what the policy reported about itself (`Policy.info()`)."""
    max_tokens = _number(info.get("max_tokens"))
    model = info.get("model")
    return {
        "model": None if model is None else str(model),
        "temperature": _number(info.get("temperature")),
        "top_p": _number(info.get("top_p")),
        "max_tokens": None if max_tokens is None else int(max_tokens),
    }


def episode_row(episode: Episode, spec: BatchSpec | None = None) -> dict[str, Any]:
    """One Parquet row for an episode; `spec`, the batch's settings, fills the batch columns."""
    return {
        "episode_id": episode.episode_id,
        "env_id": episode.env_id,
        "env_version": episode.env_version,
        "provenance": episode.provenance.model_dump(),
        "seed": episode.seed,
        "policy": episode.policy,
        "policy_info_json": json.dumps(episode.policy_info),
        "policy_spec": spec.policy if spec else None,
        **_settings(episode.policy_info),
        "env_kwargs_json": json.dumps(spec.env_kwargs, default=str) if spec else None,
        "tools": [_tool_row(t) for t in episode.tools],
        "messages": [openai_message(m) for m in episode.messages],
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
        "recording_json": episode.recording.model_dump_json() if episode.recording is not None else None,
        "parent": episode.parent,
        "fork_turn": episode.fork_turn,
        "node": episode.node,
        "sandbox_provider": episode.sandbox_provider,
    }


def episode_from_row(row: dict[str, Any]) -> Episode:
    """The Episode a row was written from (derived columns such as `samples` are recomputed on demand).

    Rows of schema version 1 have no `tools` column; their episodes have no tools.
    """
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
            "tools": [_tool(t) for t in row.get("tools") or []],
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
            "recording": json.loads(row["recording_json"]) if row.get("recording_json") else None,
            "parent": row.get("parent"),
            "fork_turn": row.get("fork_turn"),
            "node": row.get("node"),
            "sandbox_provider": row.get("sandbox_provider"),
        }
    )


def episodes_table(episodes: list[Episode], spec: BatchSpec | None = None) -> pa.Table:
    rows = [episode_row(e, spec) for e in episodes]
    return pa.Table.from_pylist(rows, schema=_STORAGE_SCHEMA).cast(SCHEMA)
