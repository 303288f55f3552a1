"""Replays a fixed list of actions: for tests, demos and reproducing a reported episode."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envhub.core import Action
from envhub.messages import Message
from envhub.policies.base import Policy
from envhub.tools import ToolSpec


class ScriptedPolicy(Policy):
    """Plays `actions` in order, one per turn, restarting the script for every episode."""

    name = "scripted"
    engine = "script"

    def __init__(self, actions: Sequence[Action], *, source: Path | None = None) -> None:
        if not actions:
            raise ValueError("a scripted policy needs at least one action")
        self.actions = list(actions)
        self.source = source
        self.position = 0

    def info(self) -> dict[str, Any]:
        """The script's file, length and hash: which script played, even after the file changed."""
        script = json.dumps(
            [a.model_dump(mode="json") if isinstance(a, Message) else a for a in self.actions],
            sort_keys=True,
        )
        return {
            **super().info(),
            "source": None if self.source is None else str(self.source),
            "actions": len(self.actions),
            "script_sha256": hashlib.sha256(script.encode()).hexdigest(),
        }

    @classmethod
    def from_file(cls, path: Path) -> ScriptedPolicy:
        """A JSON list of actions: strings, or messages in OpenAI's format."""
        try:
            actions = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read the script {path}: {exc}") from exc
        if not isinstance(actions, list):
            raise ValueError(f"{path}: a script is a JSON list of actions (strings or message objects)")
        return cls(actions, source=path)

    def for_episode(self, env: object) -> Policy:
        return ScriptedPolicy(self.actions, source=self.source)

    async def act(self, messages: list[Message], tools: list[ToolSpec]) -> Action:
        if self.position >= len(self.actions):
            raise IndexError(f"the script has only {len(self.actions)} actions and the episode wants more")
        action = self.actions[self.position]
        self.position += 1
        return action
