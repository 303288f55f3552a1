"""Conversations as Hugging Face chat templates expect them, for every local model envhub runs.

The transformers policy, the trainer's engines and the local reward model all apply a tokenizer's chat
template to envhub messages; they must render a conversation the same way, or the tokens a policy
sampled and the tokens it is trained or scored on would differ.
"""

from __future__ import annotations

import json
from typing import Any

from envhub.messages import Message, refuse_images
from envhub.text_format import render
from envhub.tools import ToolSpec


def template_message(message: Message, *, objects_only: bool = False) -> dict[str, Any]:
    """A message as Hugging Face chat templates expect it: tool-call arguments as objects, text only.

    Templates render arguments with `tojson`, so raw JSON text would come out quoted; images are left
    out because the models served here read text only. `objects_only`: arguments that are valid JSON but
    not an object stay text, as TRL's datasets (`envhub.store.export`) carry objects only.
    """
    out: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _arguments(c.arguments, objects_only)},
            }
            for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    return out


def prompt_ids(
    tokenizer: Any, messages: list[Message], tools: list[ToolSpec], chat_template: str | None = None
) -> list[int]:
    """The chat template applied once to the whole conversation, with the assistant's cue, as ids.

    The rendering is text only (`template_message`): a model asked about an image it was never shown
    learns nothing true, so a conversation with an image is refused rather than rendered without it."""
    refuse_images(
        messages, sender="the conversation", reader="this local model's prompt is rendered as text only"
    )
    ids = tokenizer.apply_chat_template(
        [template_message(m) for m in messages],
        tools=[t.to_openai() for t in tools] or None,
        chat_template=chat_template,
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    if not isinstance(ids, list):  # some tokenizers answer a BatchEncoding whatever return_dict says
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def _arguments(raw: str, objects_only: bool) -> Any:
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return raw  # broken JSON the model wrote stays as it was, so the template shows the same text
    return raw if objects_only and not isinstance(value, dict) else value


def conversation_text(tokenizer: Any, messages: list[Message], *, chat_template: bool = True) -> str:
    """The text a model reads for a whole conversation (no generation cue): the tokenizer's template,
    or `role: text` paragraphs when it has none or `chat_template` is False."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        text: str = tokenizer.apply_chat_template([template_message(m) for m in messages], tokenize=False)
        return text
    return "\n\n".join(f"{m.role}: {render([m])}" for m in messages)
