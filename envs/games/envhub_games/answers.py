"""Reading the number out of a free-text answer, shared by the games' reward methods."""

from __future__ import annotations

import re

_INTEGER = re.compile(r"-?\d[\d,]*")


def last_integer(text: str) -> int | None:
    """The last integer written in `text` ("The answer is 1,234." -> 1234), or None."""
    found = _INTEGER.findall(text)
    if not found:
        return None
    return int(found[-1].replace(",", ""))
