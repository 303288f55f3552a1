"""Chat messages as plain text and back, for text-in/text-out consumers such as the gymnasium adapter.

Tool calls use the `<tool_call>{json}</tool_call>` convention of Hermes / Qwen chat templates, which
most open models are trained on, so raw model output can be passed as an action unchanged.
"""

from __future__ import annotations

import json
import re

from envhub.messages import Message, ToolCall

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def render(messages: list[Message]) -> str:
    """Messages as text: tool results in `<tool_response>` blocks, tool calls in `<tool_call>` blocks."""
    parts = []
    for message in messages:
        if message.role == "tool":
            parts.append(f"<tool_response>\n{message.text}\n</tool_response>")
            continue
        parts.append(message.text)
        parts.extend(
            f'<tool_call>\n{{"name": {json.dumps(call.name)}, "arguments": {call.arguments}}}\n</tool_call>'
            for call in message.tool_calls
        )
    return "\n".join(part for part in parts if part)


def parse_assistant_text(text: str) -> Message:
    """An assistant message from model text; each `<tool_call>` block becomes a tool call.

    A block whose JSON is broken is kept as a call with the raw text as arguments, so the environment
    can tell the agent what was wrong instead of the call silently disappearing.
    """
    calls = []
    for i, block in enumerate(_TOOL_CALL.findall(text)):
        try:
            payload = json.loads(block)
            name = str(payload.get("name", "")) if isinstance(payload, dict) else ""
            arguments = payload.get("arguments", {}) if isinstance(payload, dict) else {}
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        except json.JSONDecodeError:
            name, raw = "", block
        calls.append(ToolCall(id=f"call_{i}", name=name, arguments=raw))
    content = _TOOL_CALL.sub("", text).strip() if calls else text
    return Message(role="assistant", content=content, tool_calls=calls)
