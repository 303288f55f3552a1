"""When a desktop's screen counts as still, and which frame the first observation shows.

A reset observes the screen once the app has painted it: the framebuffer unchanged for a quiet time.
A caret that blinks by itself never lets it be unchanged (LibreOffice's `gen` plugin blinks every 500 ms
whatever GTK's settings say), and a screenshot would catch the caret at a random phase, so two resets of
one seed would show different first screens. So a change confined to a caret-sized box counts as a
blink, not a change, and the first observation is the frame with the caret drawn (the one with more ink
in the blink's box), taken from framebuffer bytes the wait itself read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from PIL import Image, ImageChops, ImageStat

from envhub_desktop.xwd import xwd_to_image

BLINK_MAX_WIDTH = 4
"""A text caret is one to three pixels wide (LibreOffice: 2; GTK: 1)."""
BLINK_MAX_HEIGHT = 64
"""...and a line of text tall: a change in a box this small and no larger is a caret blinking."""

Box = tuple[int, int, int, int]


def changed_box(before: Image.Image, after: Image.Image) -> Box | None:
    """The smallest box holding every pixel that differs (None: the frames are equal)."""
    return ImageChops.difference(before, after).getbbox()


def is_blink(box: Box) -> bool:
    left, top, right, bottom = box
    return right - left <= BLINK_MAX_WIDTH and bottom - top <= BLINK_MAX_HEIGHT


def ink(image: Image.Image, box: Box) -> float:
    """How dark the box is: the drawn caret's phase has more ink than the erased one's."""
    return -sum(ImageStat.Stat(image.crop(box).convert("L")).sum)


@dataclass
class Settled:
    frame: bytes
    """The framebuffer bytes to show: the last frame, or the caret-drawn phase of a blinking one."""
    still: bool
    """False when the screen kept changing for the whole wait."""
    blinks: int = 0


async def settle(read: Callable[[], Awaitable[bytes]], *, quiet: float, within: float) -> Settled:
    """Read frames every 0.1 s until nothing but a caret has changed for `quiet` seconds (`within` at
    most); blinks are counted and do not restart the quiet time."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last = await read()
    last_image = await asyncio.to_thread(xwd_to_image, last)
    since, blinks = loop.time(), 0
    phases: dict[float, bytes] = {}
    """While blinking: each phase's ink in the blink box -> its latest frame."""
    while loop.time() < deadline:
        await asyncio.sleep(0.1)
        frame = await read()
        if frame == last:
            if loop.time() - since >= quiet:
                return Settled(_drawn(phases, last), True, blinks)
            continue
        image = await asyncio.to_thread(xwd_to_image, frame)
        box = changed_box(last_image, image)
        if box is not None and is_blink(box):
            blinks += 1
            phases[ink(last_image, box)], phases[ink(image, box)] = last, frame
        else:
            since, phases = loop.time(), {}
        last, last_image = frame, image
        if loop.time() - since >= quiet:
            return Settled(_drawn(phases, last), True, blinks)
    return Settled(last, False, blinks)


def _drawn(phases: dict[float, bytes], last: bytes) -> bytes:
    return phases[max(phases)] if len(phases) >= 2 else last
