"""Export a batch to the JSON Lines datasets TRL's trainers read, so a rollout can be trained on directly.

`sft`: TRL's conversational language-modeling type, one row per episode: `messages` (the whole
conversation, tool calls included) and `tools` (the JSON schemas the model was shown), which is what
`SFTTrainer` reads for tool calling. `grpo`: the conversational prompt-only type `GRPOTrainer` reads,
one row per distinct task: `prompt` (the messages before the agent's first turn), with `env_id` and
`seed` beside it, which TRL passes to reward functions as keyword arguments.

TRL's messages carry tool-call arguments as objects, where OpenAI's carry JSON text: arguments that
are not a JSON object (a malformed call the agent made) stay text. Images are left out: `content` is
each message's text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from envhub.inference.chat_template import template_message
from envhub.messages import Message
from envhub.records import Episode
from envhub.store.manifest import write_atomically
from envhub.store.reader import read_episodes

ExportKind = Literal["sft", "grpo"]


def trl_message(message: Message) -> dict[str, Any]:
    """A message as TRL's conversational datasets (and transformers' chat templates) expect it."""
    return template_message(message, objects_only=True)


def sft_row(episode: Episode) -> dict[str, Any]:
    return {
        "messages": [trl_message(m) for m in episode.messages],
        "tools": [t.to_openai() for t in episode.tools],
        "episode_id": episode.episode_id,
        "env_id": episode.env_id,
        "seed": episode.seed,
        "reward": episode.reward,
    }


def grpo_row(episode: Episode) -> dict[str, Any]:
    return {
        "prompt": [trl_message(m) for m in episode.prompt],
        "env_id": episode.env_id,
        "seed": episode.seed,
    }


def export_trl(root: Path, out: Path, *, kind: ExportKind = "sft", min_reward: float | None = None) -> int:
    """Write the batch in `root` to `out` (JSON Lines) for TRL's SFT or GRPO trainer; returns the row count.

    Episodes that ended in an infrastructure error are left out (their conversations stop half way);
    `min_reward` keeps only episodes whose return reached it (rejection sampling for SFT).
    """
    if kind not in ("sft", "grpo"):
        raise ValueError(
            f"unknown export kind {kind!r}: choose 'sft' (whole conversations) or 'grpo' (prompts)"
        )
    episodes = [
        e for e in read_episodes(root) if e.error is None and (min_reward is None or e.reward >= min_reward)
    ]
    if kind == "sft":
        rows = [sft_row(e) for e in episodes]
    else:
        unique: dict[str, dict[str, Any]] = {}
        for e in episodes:
            row = grpo_row(e)
            unique.setdefault(json.dumps(row, sort_keys=True), row)
        rows = list(unique.values())
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode())
    return len(rows)
