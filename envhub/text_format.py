"""Chat messages as plain text and back, for text-in/text-out consumers such as the gymnasium adapter.

Tool calls use the `<tool_call>{json}</tool_call>` convention of Hermes / Qwen chat templates, which
most open models are trained on, so raw model output can be passed as an action unchanged. The same
convention serves models whose server or chat template cannot take tools (`tool_prompt`): the tool schemas
go into the system prompt and the calls come back as text.

One rule everywhere: an action given as a string is model text, so its `<tool_call>` blocks are tool calls
(`parse_assistant_text`), whether it reaches an environment through `step()`, the gymnasium adapter or
`envhub play`. An action given as a message is taken as it is.
"""

from __future__ import annotations

import json
import re

from envhub.messages import Message, ToolCall, system, user
from envhub.tools import ToolSpec

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


TOOLS_INSTRUCTIONS = """# Tools

You can call the functions described in JSON schema inside <tools></tools>:
<tools>
{tools}
</tools>

To call a function, write its name and JSON arguments inside <tool_call></tool_call> tags, one block per call:
<tool_call>
{{"name": "<function name>", "arguments": {{<arguments as a JSON object>}}}}
</tool_call>
The results come back inside <tool_response></tool_response> tags."""
"""The tool section added to the system prompt when tools travel as text (`tool_prompt`)."""


def tool_prompt(
    messages: list[Message], tools: list[ToolSpec], *, raw: dict[str, str] | None = None
) -> list[Message]:
    """The conversation as a model sees it when its server or chat template cannot take tools.

    The tool schemas join the system prompt (one is added if there is none), assistant tool calls are
    written as `<tool_call>` blocks and tool results as a user turn of `<tool_response>` blocks, so only
    the roles every chat template knows remain. `raw` maps an assistant message's JSON to the exact text
    the model wrote, so the model sees its own words again (and its tokens do not drift).
    """
    out: list[Message] = []
    previous = None
    for message in messages:
        if message.role == "tool":
            block = render([message])
            if previous == "tool":  # one user turn holds the results of one turn's calls
                out[-1] = user(out[-1].text + "\n" + block)
            else:
                out.append(user(block))
        elif message.role == "assistant" and message.tool_calls:
            written = (raw or {}).get(message.model_dump_json())
            out.append(
                Message(role="assistant", content=written if written is not None else render([message]))
            )
        else:
            out.append(message)
        previous = message.role
    if not tools:
        return out
    section = TOOLS_INSTRUCTIONS.format(tools="\n".join(json.dumps(t.to_openai()) for t in tools))
    if out and out[0].role == "system":
        return [system(f"{out[0].text}\n\n{section}"), *out[1:]]
    return [system(section), *out]
