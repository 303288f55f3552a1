"""Printing conversations to the terminal with rich, for `envhub play` and episode viewers."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from envhub.messages import Message
from envhub.text_format import render

STYLES = {"system": "dim", "user": "cyan", "assistant": "green", "tool": "magenta"}


def message_panel(message: Message) -> Panel:
    body = render([message]) or "(empty)"
    images = len(message.images)
    title = message.role + (f" · {message.name}" if message.name else "")
    if images:
        title += f" · {images} image{'s' if images > 1 else ''}"
    return Panel(Text(body), title=title, title_align="left", border_style=STYLES[message.role])


def print_messages(messages: list[Message], console: Console | None = None) -> None:
    console = console or Console()
    for message in messages:
        console.print(message_panel(message))
