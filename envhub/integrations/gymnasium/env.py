"""A synchronous `gymnasium.Env` over any envhub environment, for code written for the classic API.

Observations are the text of the new messages (and, when `image_shape` is given, the latest image as
an RGB array); actions are the assistant's text, with tool calls written as `<tool_call>` blocks.
All adapters of a process share one background event loop, so the adapter also works inside a running
loop (a notebook) without nesting loops; a forked process starts its own, since threads do not survive
a fork. Making every envhub id a gymnasium id is `envhub.integrations.gymnasium.ids`'s job.
"""

from __future__ import annotations

import io
import multiprocessing
from collections.abc import Sequence
from ctypes import c_int32
from multiprocessing.sharedctypes import SynchronizedArray
from types import ModuleType
from typing import Any, overload

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import shared_memory

from envhub.core import Env, EnvSpec
from envhub.messages import Message
from envhub.sync_loop import run
from envhub.text_format import parse_assistant_text, render


class UnicodeText(spaces.Text):
    """A text space of any characters: environment text is not limited to gymnasium's default charset.

    In `AsyncVectorEnv`'s shared memory a text is stored as code points (plus one, so that zero pads),
    not as indices into a character set.
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length


@shared_memory.create_shared_memory.register(UnicodeText)
def _create_text_memory(
    space: UnicodeText, n: int = 1, ctx: ModuleType = multiprocessing
) -> SynchronizedArray[c_int32]:
    memory: SynchronizedArray[c_int32] = ctx.Array(np.dtype(np.int32).char, n * space.max_length)
    return memory


def _text_slots(space: UnicodeText, memory: SynchronizedArray[c_int32]) -> np.ndarray[Any, Any]:
    return np.ctypeslib.as_array(memory.get_obj()).reshape((-1, space.max_length))


class SharedTexts(Sequence[str]):
    """The texts in `AsyncVectorEnv`'s shared memory, read when accessed.

    gymnasium reads its shared memory once and relies on getting views that follow later writes, which
    numeric arrays are; a tuple of strings would stay as it was at the start. A deep copy (what the
    vector env returns by default) is a plain tuple of the texts at that moment.
    """

    def __init__(self, space: UnicodeText, memory: SynchronizedArray[c_int32], n: int) -> None:
        self._slots = _text_slots(space, memory)[:n]

    def __len__(self) -> int:
        return len(self._slots)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...
    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(_decode(row) for row in self._slots[index])
        return _decode(self._slots[index])

    def __eq__(self, other: object) -> bool:
        return tuple(self) == other if isinstance(other, tuple | SharedTexts) else NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"SharedTexts{tuple(self)!r}"

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)


def _decode(row: np.ndarray[Any, Any]) -> str:
    return "".join(chr(c - 1) for c in row.tolist() if c > 0)


@shared_memory.read_from_shared_memory.register(UnicodeText)
def _read_text_memory(space: UnicodeText, memory: SynchronizedArray[c_int32], n: int = 1) -> SharedTexts:
    return SharedTexts(space, memory, n)


@shared_memory.write_to_shared_memory.register(UnicodeText)
def _write_text_memory(
    space: UnicodeText, index: int, value: str, memory: SynchronizedArray[c_int32]
) -> None:
    points = np.zeros(space.max_length, dtype=np.int32)
    points[: len(value)] = np.frombuffer(value.encode("utf-32-le"), dtype=np.uint32).astype(np.int32) + 1
    _text_slots(space, memory)[index] = points


def to_gymnasium(
    env: Env,
    *,
    max_length: int = 65_536,
    image_shape: tuple[int, int] | None = None,
    render_mode: str | None = None,
) -> GymnasiumEnv:
    """A synchronous `gymnasium.Env` over `env` (what `gymnasium.make("envhub/<id>")` builds by id)."""
    return GymnasiumEnv(env, max_length=max_length, image_shape=image_shape, render_mode=render_mode)


class GymnasiumEnv(gym.Env[Any, str]):
    """gymnasium's classic API over an envhub env: text (and optionally an image) in, text out."""

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
        observation, info = run(self.env.reset(seed=seed, options=options))
        self.transcript = list(observation)
        info = {**info, "tools": [t.to_openai() for t in self.env.tools]}
        return self._observe(observation), info

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        message = parse_assistant_text(action) if isinstance(action, str) else action
        observation, reward, terminated, truncated, info = run(self.env.step(message))
        self.transcript.append(message)
        self.transcript.extend(observation)
        return self._observe(observation), float(reward), terminated, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        return "\n".join(f"[{m.role}] {render([m])}" for m in self.transcript)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            run(self.env.close())

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
