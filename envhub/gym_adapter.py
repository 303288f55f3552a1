"""A synchronous `gymnasium.Env` over any envhub environment, for code written for the classic API.

Observations are the text of the new messages (and, when `image_shape` is given, the latest image as
an RGB array); actions are the assistant's text, with tool calls written as `<tool_call>` blocks.
All adapters share one background event loop, so the adapter also works inside a running loop
(a notebook) without nesting loops.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from envhub.core import Env, EnvSpec
from envhub.messages import Message
from envhub.text_format import parse_assistant_text, render

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on the shared background loop and wait for its result."""
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="envhub-gymnasium", daemon=True).start()
    return asyncio.run_coroutine_threadsafe(coro, _loop).result()


class UnicodeText(spaces.Text):
    """A text space of any characters: environment text is not limited to gymnasium's default charset."""

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


class GymnasiumEnv(gym.Env[Any, str]):
    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012  (gymnasium declares it per instance)

    def __init__(
        self,
        env: Env,
        *,
        max_length: int = 65_536,
        image_shape: tuple[int, int] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.env = env
        self.max_length = max_length
        self.image_shape = image_shape
        self.render_mode = render_mode
        self.action_space = UnicodeText(max_length, min_length=0)
        text = UnicodeText(max_length, min_length=0)
        if image_shape is None:
            self.observation_space: spaces.Space[Any] = text
        else:
            height, width = image_shape
            image = spaces.Box(0, 255, (height, width, 3), np.uint8)
            self.observation_space = spaces.Dict({"text": text, "image": image})
        self.transcript: list[Message] = []
        self._closed = False

    @property
    def envhub_spec(self) -> EnvSpec | None:
        """The wrapped environment's envhub spec (`spec` is gymnasium's own, and stays None)."""
        return self.env.spec

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        observation, info = _run(self.env.reset(seed=seed, options=options))
        self.transcript = list(observation)
        info = {**info, "tools": [t.to_openai() for t in self.env.tools]}
        return self._observe(observation), info

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        message = parse_assistant_text(action) if isinstance(action, str) else action
        result = _run(self.env.step(message))
        self.transcript.append(message)
        self.transcript.extend(result.observation)
        return (
            self._observe(result.observation),
            float(result.reward),
            result.terminated,
            result.truncated,
            (result.info),
        )

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m.role}] {render([m])}" for m in self.transcript)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _run(self.env.close())

    def _observe(self, messages: list[Message]) -> Any:
        text = render(messages)
        if len(text) > self.max_length:
            text = text[-self.max_length :]  # the end holds the newest information
        if self.image_shape is None:
            return text
        return {"text": text, "image": self._latest_image(messages)}

    def _latest_image(self, messages: list[Message]) -> np.ndarray[Any, np.dtype[np.uint8]]:
        assert self.image_shape is not None
        height, width = self.image_shape
        images = [image for message in messages for image in message.images]
        if not images:
            return np.zeros((height, width, 3), np.uint8)
        from PIL import Image

        with Image.open(io.BytesIO(images[-1].data)) as picture:
            return np.asarray(picture.convert("RGB").resize((width, height)), dtype=np.uint8)
