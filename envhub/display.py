"""Printing conversations and episodes to the terminal with rich, for `envhub play` and `envhub show`."""

from __future__ import annotations

import json
import mimetypes
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from envhub.messages import Message
from envhub.records import Episode, Turn
from envhub.text_format import render

STYLES = {"system": "dim", "user": "cyan", "assistant": "green", "tool": "magenta"}


def message_panel(message: Message, image_files: Sequence[Path] = ()) -> Panel:
    """One message; its images are counted in the title, and named by file when they were saved."""
    body = render([message]) or "(empty)"
    images = len(message.images)
    title = message.role + (f" · {message.name}" if message.name else "")
    if images:
        title += f" · {images} image{'s' if images > 1 else ''}"
    if image_files:
        body += "\n" + "\n".join(f"[image] {path}" for path in image_files)
    return Panel(Text(body), title=title, title_align="left", border_style=STYLES[message.role])


def print_messages(messages: list[Message], console: Console | None = None) -> None:
    console = console or Console()
    for message in messages:
        console.print(message_panel(message))


class ImageSaver:
    """Prints messages like `print_messages` and writes each image to a folder as it arrives, so a
    terminal user can open the screen an agent saw (`envhub play --images DIR`)."""

    def __init__(self, folder: Path, console: Console | None = None) -> None:
        self.folder, self.console, self.count = folder, console or Console(), 0
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, messages: list[Message]) -> None:
        for message in messages:
            files = []
            for image in message.images:
                self.count += 1
                suffix = mimetypes.guess_extension(image.mime_type) or ".bin"
                path = self.folder / f"image-{self.count:03d}{suffix}"
                path.write_bytes(image.data)
                files.append(path)
            self.console.print(message_panel(message, files))


def episode_header(episode: Episode) -> Text:
    """One line that identifies an episode and says how it went, so a scrolled-past turn has context."""
    line = Text()
    line.append(f"episode {episode.episode_id}", style="bold")
    line.append(f" · seed {episode.seed if episode.seed is not None else '–'}")
    version = f" (v{episode.env_version})" if episode.env_version is not None else ""
    line.append(f" · {episode.env_id}{version} · policy {episode.policy}")
    line.append(f" · reward {episode.reward:.3f}", style="bold")
    if episode.reward_components:
        parts = ", ".join(f"{name}={value:.3f}" for name, value in episode.reward_components.items())
        line.append(f" ({parts})")
    ending = episode.ending
    line.append(
        f" · {ending}", style={"error": "red", "truncated": "yellow", "terminated": "green"}.get(ending)
    )
    line.append(f" · {len(episode.turns)} turn{'s' if len(episode.turns) != 1 else ''}")
    if episode.provenance.lock_hash is not None:
        line.append(f" · lock {episode.provenance.lock_hash}", style="dim")
    if episode.error is not None:
        line.append(f" · {episode.error.kind}: {episode.error.message}", style="red")
    return line


def lock_summary(episodes: list[Episode]) -> Text:
    """Which lock hashes the episodes ran under (`envhub lock`): one line, each hash with its count."""
    counts = Counter(e.provenance.lock_hash for e in episodes)
    unknown = counts.pop(None, 0)
    line = Text("lock: ", style="bold")
    line.append(", ".join(f"{h} ({n} episode{'s' if n != 1 else ''})" for h, n in sorted(counts.items())))
    if unknown:
        line.append(("; " if counts else "") + f"{unknown} episode{'s' if unknown != 1 else ''} without one")
    return line


def _turn_title(turn: Turn) -> str:
    title = f"turn {turn.index} · reward {turn.reward:.3f}"
    if turn.tokens is not None:
        prompt = turn.tokens.prompt_token_ids
        title += f" · tokens {len(prompt) if prompt is not None else '?'} prompt"
        title += f" / {len(turn.tokens.completion_token_ids)} completion"
        if turn.tokens.finish_reason:
            title += f" ({turn.tokens.finish_reason})"
        if turn.tokens.sample_break:
            title += f" · sample break: {turn.tokens.sample_break}"
    return title


def print_episode(episode: Episode, console: Console | None = None) -> None:
    """The whole episode turn by turn: the prompt, then each action, its observation and its reward."""
    console = console or Console()
    console.print(episode_header(episode))
    print_messages(episode.prompt, console)
    for turn in episode.turns:
        console.print(Rule(_turn_title(turn), align="left"))
        console.print(message_panel(turn.action))
        print_messages(turn.observation, console)
        if "error" in turn.info:
            console.print(Text(f"info.error: {turn.info['error']}", style="red"))
        rest = {k: v for k, v in turn.info.items() if k != "error"}
        if rest:
            console.print(Text("info: " + json.dumps(rest, default=str, ensure_ascii=False), style="dim"))
    if not episode.turns:
        console.print(Text("(no turns)", style="dim"))
