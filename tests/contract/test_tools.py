"""Tool schemas come from typed signatures, and arguments are checked against the same model."""

from __future__ import annotations

from typing import Literal

import pytest

from envhub.tools import Tool, ToolArgumentError


def search(query: str, limit: int = 5, mode: Literal["exact", "fuzzy"] = "fuzzy") -> list[str]:
    """Search the corpus.

    Finds documents by keyword.

    Args:
        query: Words to look for.
        limit: Most results to return.
    """
    return [query] * limit


def test_schema_is_derived_from_signature_and_docstring() -> None:
    spec = Tool(search).spec
    assert spec.name == "search"
    assert spec.description == "Search the corpus.\n\nFinds documents by keyword."
    assert spec.parameters == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "query": {"type": "string", "description": "Words to look for."},
            "limit": {"type": "integer", "default": 5, "description": "Most results to return."},
            "mode": {"type": "string", "enum": ["exact", "fuzzy"], "default": "fuzzy"},
        },
        "required": ["query"],
    }
    assert spec.to_openai()["function"]["name"] == "search"


async def test_valid_arguments_are_parsed_and_called() -> None:
    tool = Tool(search)
    assert await tool(tool.parse_arguments('{"query": "cat", "limit": 2}')) == ["cat", "cat"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"query": "cat",', "arguments are not valid JSON"),
        ("[1, 2]", "arguments must be a JSON object, got list"),
        ('{"limit": 3}', "invalid arguments for search: query: Field required"),
        ('{"query": "x", "limit": "many"}', "limit: Input should be a valid integer"),
        ('{"query": "x", "mode": "regex"}', "mode: Input should be 'exact' or 'fuzzy'"),
        ('{"query": "x", "colour": "red"}', "colour: Extra inputs are not permitted"),
    ],
)
def test_bad_arguments_are_explained(arguments: str, message: str) -> None:
    with pytest.raises(ToolArgumentError, match=message):
        Tool(search).parse_arguments(arguments)


def test_untyped_parameter_is_refused_at_definition() -> None:
    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(TypeError, match="parameter 'x' needs a type annotation"):
        Tool(untyped)


def test_var_kwargs_are_refused() -> None:
    def loose(**options: int) -> None:
        return None

    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs cannot be described"):
        Tool(loose)
