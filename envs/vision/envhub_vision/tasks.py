"""The task kinds: each draws its image(s) from `rng` and keeps the answer host-side, out of the image.

Every kind is a function `(rng, width, height) -> VisionTask`; the answer is decided before drawing, so the
picture is made to fit the answer rather than the answer read back from the picture.
"""

from __future__ import annotations

import io
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont

from envhub.grading import numbers

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 160, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 200, 30),
    "purple": (140, 60, 170),
    "orange": (240, 130, 20),
}
SHAPES = ("circle", "square", "triangle")
MAX_DIGITS = 18
"""Counts, clock readings, grid cells and pixel coordinates all have a few digits."""
CODE_ALPHABET = "ACDEFHJKLMNPRTUVWXY34679"  # no 0/O, 1/I, 2/Z, 5/S, 8/B look-alikes


@dataclass(frozen=True)
class VisionTask:
    """One question about one or more images; `grade` decides a reply host-side."""

    kind: str
    question: str
    images: list[bytes]
    answer: str
    """The reference answer, as the oracle replies it."""
    grade: Callable[[str], bool]


def integers(text: str) -> list[int]:
    """Every integer written in `text`, in order (a comma separates two). One of more than `MAX_DIGITS`
    digits stands as ±10**MAX_DIGITS (envhub's bounded reader): the reply decides how long a number is,
    and past ~308 digits math.dist overflowed, crashing the reward; every answer here is far smaller."""
    return numbers.integers(text, grouping=False, max_digits=MAX_DIGITS)


def png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    return buffer.getvalue()


def draw_shape(
    draw: ImageDraw.ImageDraw, shape: str, centre: tuple[float, float], radius: float, fill: tuple[int, ...]
) -> None:
    x, y = centre
    if shape == "circle":
        draw.ellipse((x - radius, y - radius, x + radius, y + radius), fill=fill, outline=(0, 0, 0))
    elif shape == "square":
        r = radius * 0.85
        draw.rectangle((x - r, y - r, x + r, y + r), fill=fill, outline=(0, 0, 0))
    else:
        points = [
            (x + radius * math.sin(a), y - radius * math.cos(a))
            for a in (0, 2 * math.pi / 3, 4 * math.pi / 3)
        ]
        draw.polygon(points, fill=fill, outline=(0, 0, 0))


def grid_cells(rng: random.Random, width: int, height: int, count: int) -> list[tuple[float, float, float]]:
    """`count` non-overlapping (x, y, radius) spots: cells of a grid, jittered inside their cell."""
    cols, rows = 6, 4
    cell_w, cell_h = width / cols, height / rows
    radius = min(cell_w, cell_h) * 0.32
    spots = rng.sample([(c, r) for c in range(cols) for r in range(rows)], count)
    slack_x, slack_y = cell_w / 2 - radius - 2, cell_h / 2 - radius - 2
    return [
        (
            (c + 0.5) * cell_w + rng.uniform(-slack_x, slack_x),
            (r + 0.5) * cell_h + rng.uniform(-slack_y, slack_y),
            radius,
        )
        for c, r in spots
    ]


def count_shapes(rng: random.Random, width: int, height: int) -> VisionTask:
    shape, colour = rng.choice(SHAPES), rng.choice(sorted(COLOURS))
    target = rng.randint(1, 6)
    others = rng.randint(3, 10)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    spots = grid_cells(rng, width, height, target + others)
    for i, (x, y, r) in enumerate(spots):
        if i < target:
            draw_shape(draw, shape, (x, y), r, COLOURS[colour])
            continue
        while (other := (rng.choice(SHAPES), rng.choice(sorted(COLOURS)))) == (shape, colour):
            pass
        draw_shape(draw, other[0], (x, y), r, COLOURS[other[1]])
    return VisionTask(
        kind="count-shapes",
        question=f"How many {colour} {shape}s are in the image? Reply with a number.",
        images=[png(image)],
        answer=str(target),
        grade=lambda reply: integers(reply)[-1:] == [target],
    )


def bar_chart(rng: random.Random, width: int, height: int) -> VisionTask:
    from matplotlib.figure import Figure

    labels = rng.sample(
        ["Ash", "Birch", "Cedar", "Elm", "Fir", "Maple", "Oak", "Pine", "Yew"], rng.randint(3, 6)
    )
    values = [rng.randrange(10, 101, 10) for _ in labels]
    asked = rng.randrange(len(labels))
    figure = Figure(figsize=(width / 100, height / 100), dpi=100)
    axes = figure.add_subplot()
    axes.bar(
        labels, values, color=[tuple(v / 255 for v in rng.choice(list(COLOURS.values()))) for _ in labels]
    )
    axes.set_yticks(range(0, 101, 10))
    axes.set_ylim(0, 105)
    axes.grid(axis="y", linewidth=0.5)
    axes.tick_params(labelsize=7)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    target = values[asked]
    return VisionTask(
        kind="bar-chart",
        question=f"What is the value of the bar labelled {labels[asked]!r}? Every value is a multiple of 10.",
        images=[buffer.getvalue()],
        answer=str(target),
        grade=lambda reply: integers(reply)[-1:] == [target],
    )


def compare_images(rng: random.Random, width: int, height: int) -> VisionTask:
    """Two 3x3 grids of shapes that differ in exactly one cell, by shape or by colour."""
    cells = [(rng.choice(SHAPES), rng.choice(sorted(COLOURS))) for _ in range(9)]
    changed = rng.randrange(9)
    shape, colour = cells[changed]
    if rng.random() < 0.5:
        swapped = (rng.choice([s for s in SHAPES if s != shape]), colour)
    else:
        swapped = (shape, rng.choice([c for c in sorted(COLOURS) if c != colour]))
    pictures = []
    for version in (cells, [swapped if i == changed else cell for i, cell in enumerate(cells)]):
        image = Image.new("RGB", (width, height), "white")
        draw = ImageDraw.Draw(image)
        radius = min(width, height) / 9
        for i, (s, c) in enumerate(version):
            row, col = divmod(i, 3)
            draw_shape(draw, s, ((col + 0.5) * width / 3, (row + 0.5) * height / 3), radius, COLOURS[c])
        pictures.append(png(image))
    row, col = divmod(changed, 3)
    return VisionTask(
        kind="compare-images",
        question=(
            "The two images each show a 3x3 grid of shapes and differ in exactly one cell. Which one? "
            "Reply with its row and column, counted from 1 at the top left, as 'row, column'."
        ),
        images=pictures,
        answer=f"{row + 1}, {col + 1}",
        grade=lambda reply: integers(reply)[-2:] == [row + 1, col + 1],
    )


def read_text(rng: random.Random, width: int, height: int) -> VisionTask:
    code = "".join(rng.choice(CODE_ALPHABET) for _ in range(6))
    image = Image.new("RGB", (width, height), (245, 245, 240))
    draw = ImageDraw.Draw(image)
    for _ in range(8):  # clutter a reader must see past
        draw.line(
            [(rng.uniform(0, width), rng.uniform(0, height)) for _ in range(2)],
            fill=(rng.randint(150, 210),) * 3,
            width=2,
        )
    font = ImageFont.load_default(size=max(16, height // 5))
    text = f"{code[:3]} {code[3:]}"
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    x = rng.uniform(4, max(5.0, width - (right - left) - 4))
    y = rng.uniform(4, max(5.0, height - (bottom - top) - 4 - top))
    draw.text((x, y), text, font=font, fill=(20, 20, 60))
    return VisionTask(
        kind="read-text",
        question="The image shows a six-character code. Reply with the code exactly as shown.",
        images=[png(image)],
        answer=code,
        grade=lambda reply: re.sub(r"[\s\-]", "", reply).upper().endswith(code),
    )


def locate_object(rng: random.Random, width: int, height: int) -> VisionTask:
    """One red star among grey shapes; a click within its radius counts."""
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    spots = grid_cells(rng, width, height, rng.randint(4, 9))
    (tx, ty, tr), others = spots[0], spots[1:]
    for x, y, r in others:
        draw_shape(draw, rng.choice(SHAPES), (x, y), r, (rng.randint(110, 190),) * 3)
    points = [
        (
            tx + (tr if i % 2 == 0 else tr * 0.45) * math.sin(i * math.pi / 5),
            ty - (tr if i % 2 == 0 else tr * 0.45) * math.cos(i * math.pi / 5),
        )
        for i in range(10)
    ]
    draw.polygon(points, fill=COLOURS["red"], outline=(0, 0, 0))
    cx, cy = round(tx), round(ty)
    return VisionTask(
        kind="locate-object",
        question=(
            f"The image is {width}x{height} pixels. Where is the red star? Reply with the pixel "
            "coordinates of its centre as 'x, y' (x from the left edge, y from the top)."
        ),
        images=[png(image)],
        answer=f"{cx}, {cy}",
        grade=lambda reply: len(xy := integers(reply)[-2:]) == 2 and math.dist(xy, (tx, ty)) <= tr * 0.8,
    )


def read_clock(rng: random.Random, width: int, height: int) -> VisionTask:
    hour, minute = rng.randint(1, 12), rng.randrange(0, 60, 5)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    cx, cy, r = width / 2, height / 2, min(width, height) * 0.42
    draw.ellipse((cx - r, cy - r, cx + r, cy + r), outline=(0, 0, 0), width=3)
    font = ImageFont.load_default(size=max(10, int(r / 6)))
    for h in range(1, 13):
        a = h * math.pi / 6
        draw.text(
            (cx + r * 0.8 * math.sin(a), cy - r * 0.8 * math.cos(a)),
            str(h),
            font=font,
            fill=(0, 0, 0),
            anchor="mm",
        )
    for length, angle, thickness in (
        (0.5, (hour % 12 + minute / 60) * math.pi / 6, 6),
        (0.75, minute * math.pi / 30, 3),
    ):
        draw.line(
            (cx, cy, cx + r * length * math.sin(angle), cy - r * length * math.cos(angle)),
            fill=(0, 0, 0),
            width=thickness,
        )
    return VisionTask(
        kind="read-clock",
        question="What time does the clock show? Reply as H:MM (12-hour, no am/pm).",
        images=[png(image)],
        answer=f"{hour}:{minute:02d}",
        grade=lambda reply: integers(reply.replace(":", " "))[-2:] == [hour, minute],
    )


KINDS: dict[str, Callable[[random.Random, int, int], VisionTask]] = {
    "count-shapes": count_shapes,
    "bar-chart": bar_chart,
    "compare-images": compare_images,
    "read-text": read_text,
    "locate-object": locate_object,
    "read-clock": read_clock,
}
