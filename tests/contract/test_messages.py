"""The shared message schema: OpenAI wire format both ways, images as bytes."""

from __future__ import annotations

import base64

import pytest

from envhub.messages import ImagePart, Message, TextPart, ToolCall, assistant, tool_result

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def test_openai_round_trip_with_text_image_and_tool_calls() -> None:
    message = Message(
        role="assistant",
        content=[TextPart(text="look"), ImagePart(data=PNG)],
        tool_calls=[ToolCall.create("zoom", {"x": 1}, id="c1")],
    )
    wire = message.to_openai()
    assert wire["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert wire["tool_calls"][0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "zoom", "arguments": '{"x": 1}'},
    }
    assert Message.from_openai(wire) == message


def test_json_round_trip_keeps_image_bytes() -> None:
    message = Message(role="user", content=[ImagePart(data=PNG), TextPart(text="what colour?")])
    restored = Message.model_validate_json(message.model_dump_json())
    assert restored.images[0].data == PNG
    assert restored.text == "what colour?"


def test_from_openai_accepts_dict_arguments_and_null_content() -> None:
    message = Message.from_openai(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"function": {"name": "f", "arguments": {"a": 2}}}],
        }
    )
    assert message.content == ""
    assert message.tool_calls[0].arguments == '{"a": 2}'
    assert message.tool_calls[0].id == "call_0"


def test_bad_data_url_is_explained() -> None:
    with pytest.raises(ValueError, match="expected a base64 data URL"):
        ImagePart.from_data_url("http://example.com/cat.png")
    with pytest.raises(ValueError, match="not valid base64"):
        ImagePart.from_data_url("data:image/png;base64,@@@")


def test_helpers_build_the_right_roles() -> None:
    assert assistant("hi").role == "assistant"
    reply = tool_result("c1", "42", name="add")
    assert (reply.role, reply.tool_call_id, reply.text) == ("tool", "c1", "42")
