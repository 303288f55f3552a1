"""Screenshots' colours and the still-screen wait, on XWD frames laid out as Xvfb writes them, and on
the real Xvfb: a red xterm must be red in the PNG the agent sees."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from envhub_desktop.desktop import Desktop
from envhub_desktop.stillness import settle
from envhub_desktop.xwd import HEADER, xwd_to_image
from PIL import Image

WIDTH, HEIGHT = 40, 30
WHITE, BLACK = (255, 255, 255), (0, 0, 0)


def xwd(
    pixels: dict[tuple[int, int], tuple[int, int, int]], background: tuple[int, int, int] = WHITE
) -> bytes:
    """An XWD v7 dump as Xvfb writes it on x86: 32-bit little-endian words, red in 0xFF0000."""
    fields = [HEADER.size, 7, 2, 24, WIDTH, HEIGHT, 0, 0, 32, 0, 32, 32, WIDTH * 4, 5]
    fields += [0xFF0000, 0x00FF00, 0x0000FF, 8, 256, 0, WIDTH, HEIGHT, 0, 0, 0]
    rows = bytearray()
    for y in range(HEIGHT):
        for x in range(WIDTH):
            r, g, b = pixels.get((x, y), background)
            rows += bytes((b, g, r, 0))
    return HEADER.pack(*fields) + bytes(rows)


def caret(on: bool) -> bytes:
    return xwd({(10, y): BLACK for y in range(5, 15)} if on else {})


def test_red_is_red() -> None:
    image = xwd_to_image(xwd({(0, 0): (255, 0, 0), (1, 0): (0, 0, 255)}))
    assert image.getpixel((0, 0)) == (255, 0, 0)
    assert image.getpixel((1, 0)) == (0, 0, 255)


def frames(sequence: Iterator[bytes]):  # type: ignore[no-untyped-def]
    async def read() -> bytes:
        return next(sequence)

    return read


def blinking() -> Iterator[bytes]:
    n = 0
    while True:
        n += 1
        yield caret(on=(n // 3) % 2 == 0)  # 0.3 s on, 0.3 s off


async def test_a_blinking_caret_is_still_and_shows_drawn() -> None:
    settled = await settle(frames(blinking()), quiet=1.0, within=5.0)
    assert settled.still and settled.blinks >= 2
    assert settled.frame == caret(on=True)


async def test_a_real_change_restarts_the_quiet_time() -> None:
    def moving() -> Iterator[bytes]:
        for n in range(1000):  # a 6-pixel-wide block moves every frame: not a caret
            yield xwd({(x, 20): BLACK for x in range(n % 30, n % 30 + 6)})

    settled = await settle(frames(moving()), quiet=0.5, within=1.5)
    assert not settled.still and settled.blinks == 0


async def test_a_still_screen_gives_its_own_frame() -> None:
    def still() -> Iterator[bytes]:
        while True:
            yield caret(on=False)

    settled = await settle(frames(still()), quiet=0.3, within=3.0)
    assert settled.still and settled.blinks == 0 and settled.frame == caret(on=False)


@pytest.mark.timeout(120)
async def test_a_red_terminal_is_red_in_the_screenshot() -> None:
    async with Desktop(width=320, height=240) as desktop:
        await desktop.launch(["xterm", "-T", "red", "-bg", "#ff0000", "-geometry", "20x5+0+0"], window="red")
        await desktop.wait_still()
        with Image.open(io.BytesIO(await desktop.screenshot())) as png:
            colours = png.convert("RGB").getcolors(320 * 240) or []
        reds = sum(n for n, rgb in colours if rgb == (255, 0, 0))
        blues = sum(n for n, rgb in colours if rgb == (0, 0, 255))
        assert reds > 1000 and blues == 0, sorted(colours, reverse=True)[:5]
