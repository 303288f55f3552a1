"""Tools are plain typed Python functions; their JSON schema and argument checking come from the signature.

One pydantic model per tool is built from the signature, so the schema the model sees and the validation
its arguments pass through can never disagree.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any, TypeVar, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from envhub.author_code import call_author_code

F = TypeVar("F", bound=Callable[..., Any])

_TOOL_MARK = "__envhub_tool__"


class ToolSpec(BaseModel):
    """What the model is told about a tool: the OpenAI `function` tool format."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolArgumentError(ValueError):
    """The agent called a tool with arguments that do not fit its signature; the message is for the agent."""


@overload
def tool(func: F, /) -> F: ...
@overload
def tool(*, name: str | None = None) -> Callable[[F], F]: ...
def tool(func: F | None = None, /, *, name: str | None = None) -> F | Callable[[F], F]:
    """Mark a method (sync or async) of a `ToolEnv` as a tool the agent can call.

    Usable bare (`@envhub.tool`) or with a name override (`@envhub.tool(name="search")`).
    """

    def mark(f: F) -> F:
        setattr(f, _TOOL_MARK, name or f.__name__)
        return f

    return mark(func) if func is not None else mark


def tool_name(func: Callable[..., Any]) -> str | None:
    """The tool name a function was marked with, or None if it is not a tool."""
    return getattr(func, _TOOL_MARK, None)


class Tool:
    """A callable tool: its spec, its argument model, and the function behind it."""

    def __init__(self, func: Callable[..., Any], *, name: str | None = None) -> None:
        self.func = func
        self.name = name or tool_name(func) or func.__name__
        doc = docstring_parser.parse(inspect.getdoc(func) or "")
        param_docs = {p.arg_name: p.description for p in doc.params}
        fields: dict[str, Any] = {}
        for param in inspect.signature(func, eval_str=True).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {self.name!r}: *args and **kwargs cannot be described to a model")
            if param.annotation is inspect.Parameter.empty:
                raise TypeError(
                    f"tool {self.name!r}: parameter {param.name!r} needs a type annotation, "
                    "because its JSON schema is derived from it"
                )
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[param.name] = (
                param.annotation,
                Field(default, description=param_docs.get(param.name)),
            )
        self.arguments_model: type[BaseModel] = create_model(
            f"{self.name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
        )
        schema = self.arguments_model.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        description = "\n\n".join(filter(None, [doc.short_description, doc.long_description]))
        self.spec = ToolSpec(name=self.name, description=description, parameters=schema)

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """Check raw JSON arguments against the signature; raise ToolArgumentError with a readable reason."""
        try:
            raw = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolArgumentError(
                f"arguments are not valid JSON ({exc.msg} at position {exc.pos})"
            ) from exc
        if not isinstance(raw, dict):
            raise ToolArgumentError(f"arguments must be a JSON object, got {type(raw).__name__}")
        try:
            parsed = self.arguments_model.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, err['loc'])) or 'arguments'}: {err['msg']}" for err in exc.errors()
            )
            raise ToolArgumentError(f"invalid arguments for {self.name}: {problems}") from exc
        return {key: getattr(parsed, key) for key in type(parsed).model_fields}

    async def __call__(self, arguments: dict[str, Any]) -> Any:
        """Run the tool; sync tools go to a worker thread so they never block the event loop."""
        return await call_author_code(self.func, **arguments)
