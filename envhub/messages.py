"""Chat messages: the one schema every environment speaks, for text, tools, browsers and vision alike.

The shape follows OpenAI's chat format so that any model server can be fed directly (`to_openai`), but
images are held as raw PNG bytes rather than data URLs so that records stay compact and comparable.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Role = Literal["system", "user", "assistant", "tool"]


class TextPart(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: Literal["text"] = "text"
    text: str


class ImagePart(BaseModel):
    """An image as encoded bytes; PNG unless `mime_type` says otherwise."""

    model_config = ConfigDict(frozen=True, ser_json_bytes="base64", val_json_bytes="base64")

    type: Literal["image"] = "image"
    data: bytes
    mime_type: str = "image/png"

    @classmethod
    def from_data_url(cls, url: str) -> ImagePart:
        header, _, payload = url.partition(",")
        if not header.startswith("data:") or ";base64" not in header:
            raise ValueError(f"expected a base64 data URL (data:image/png;base64,...), got {url[:40]!r}")
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"the image data URL is not valid base64: {exc}") from exc
        return cls(data=data, mime_type=header[5:].split(";")[0])

    def to_data_url(self) -> str:
        return f"data:{self.mime_type};base64,{base64.b64encode(self.data).decode()}"


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ToolCall(BaseModel):
    """A call the assistant asks for. `arguments` stays the raw JSON text the model wrote.

    Keeping it raw lets malformed JSON reach the environment, which answers it as the agent's mistake
    instead of the client raising before the environment ever sees it.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = "{}"

    @classmethod
    def create(cls, name: str, arguments: dict[str, Any] | None = None, *, id: str | None = None) -> ToolCall:
        return cls(id=id or f"call_{name}", name=name, arguments=json.dumps(arguments or {}))


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)

    role: Role
    content: str | list[ContentPart] = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _none_is_empty(cls, value: object) -> object:
        return "" if value is None else value

    @property
    def text(self) -> str:
        """The text of the message, images left out; what a text-only reader or a reward sees."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content if isinstance(part, TextPart))

    @property
    def images(self) -> list[ImagePart]:
        if isinstance(self.content, str):
            return []
        return [part for part in self.content if isinstance(part, ImagePart)]

    def to_openai(self) -> dict[str, Any]:
        """The message as an OpenAI-compatible chat API expects it."""
        out: dict[str, Any] = {"role": self.role}
        if isinstance(self.content, str):
            out["content"] = self.content
        else:
            out["content"] = [
                {"type": "text", "text": part.text}
                if isinstance(part, TextPart)
                else {"type": "image_url", "image_url": {"url": part.to_data_url()}}
                for part in self.content
            ]
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out

    @classmethod
    def from_openai(cls, data: dict[str, Any]) -> Message:
        """Accept the OpenAI wire format, including `image_url` parts and `function` tool calls."""
        content = data.get("content")
        if isinstance(content, list):
            content = [_part_from_openai(part) for part in content]
        calls = [
            ToolCall(
                id=call.get("id") or f"call_{i}",
                name=call.get("function", call).get("name", ""),
                arguments=_arguments_text(call.get("function", call).get("arguments", "{}")),
            )
            for i, call in enumerate(data.get("tool_calls") or [])
        ]
        return cls(
            role=data.get("role", "assistant"),
            content=content,
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


def _part_from_openai(part: dict[str, Any]) -> TextPart | ImagePart:
    if part.get("type") == "image_url":
        return ImagePart.from_data_url(part["image_url"]["url"])
    if part.get("type") == "image":
        return ImagePart.model_validate(part)
    return TextPart(text=part.get("text", ""))


def _arguments_text(arguments: object) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def refuse_images(messages: list[Message], *, sender: str, reader: str) -> None:
    """Raise where a text-only reader would drop an image: a model asked about a picture it never saw
    is graded on a question it could not answer. `reader` says why the image would be lost."""
    if any(m.images for m in messages):
        raise ValueError(
            f"{sender} has an image; {reader}, so the model would never see it: roll this env out with "
            "envhub and a policy that takes images (the openai policy against a vision-language server)"
        )


def system(text: str) -> Message:
    return Message(role="system", content=text)


def user(content: str | list[ContentPart]) -> Message:
    return Message(role="user", content=content)


def assistant(text: str = "", tool_calls: list[ToolCall] | None = None) -> Message:
    return Message(role="assistant", content=text, tool_calls=tool_calls or [])


def tool_result(call_id: str, text: str, *, name: str | None = None) -> Message:
    return Message(role="tool", content=text, tool_call_id=call_id, name=name)
