"""A self-contained HTML report of a batch of episodes, for `envhub show DIR --html report.html`.

The file must open anywhere, offline, and stay safe with agent-written text in it, so:

- Everything is inline: CSS, a little vanilla JS, histograms as SVG, images as `data:` URLs.
- The header (summary and histograms) is rendered here by jinja2 with autoescaping.
- The episodes travel as one JSON blob in a `<script type="application/json">` block (with `<`, `>`
  and `&` escaped as `\\u003c`..., so no text can close the block), and the page builds the episode
  list and the episode view from it with `textContent`. Agent text therefore never goes through an
  HTML parser, and thousands of episodes cost only their JSON, not thousands of pre-rendered views.
- Size is bounded where it can explode: images are embedded until `max_image_bytes` is spent and
  replaced by a note after that; a text longer than `max_text_chars` is cut with a note. The full
  records stay in the rollout store; the report is for looking.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from envhub.messages import ImagePart, Message
from envhub.records import Episode, Turn
from envhub.rollout.summary import BatchSummary, summarize
from envhub.store.manifest import manifest_path

MAX_IMAGE_BYTES = 64 * 1024 * 1024
MAX_TEXT_CHARS = 50_000
REWARD_BINS = 10
MAX_TURN_BARS = 30
"""Turn counts get one bar per integer up to this many bars, equal-width bins beyond."""


@dataclass(frozen=True)
class Bin:
    """One bar of a histogram: values in [lo, hi), the last bin closed on the right."""

    lo: float
    hi: float
    count: int
    label: str


@dataclass(frozen=True)
class SvgBar:
    x: float
    y: float
    width: float
    height: float
    count: int
    label: str


@dataclass(frozen=True)
class SvgTick:
    x: float
    label: str


@dataclass(frozen=True)
class SvgHistogram:
    """A histogram laid out for the template, so the template only draws what it is given."""

    title: str
    x_label: str
    bars: list[SvgBar]
    ticks: list[SvgTick]
    y_max: int
    width: int = 440
    height: int = 210
    left: int = 44
    right: int = 12
    top: int = 12
    bottom: int = 48

    @property
    def plot_width(self) -> int:
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> int:
        return self.height - self.top - self.bottom

    @property
    def baseline(self) -> int:
        return self.top + self.plot_height


def histogram(values: list[float], *, bins: int) -> list[Bin]:
    """Equal-width bins over [min, max] of the finite values; one bin when they are all equal."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return []
    lo, hi = min(finite), max(finite)
    if lo == hi:
        return [Bin(lo, hi, len(finite), f"{lo:.3g}")]
    counts = [0] * bins
    for value in finite:
        # Multiplying before dividing (and a hair of slack) keeps 0.3 in the 0.3-0.4 bin, not 0.2-0.3.
        counts[min(bins - 1, math.floor((value - lo) * bins / (hi - lo) + 1e-9))] += 1
    width = (hi - lo) / bins
    return [
        Bin(lo + i * width, lo + (i + 1) * width, n, f"{lo + i * width:.3g}–{lo + (i + 1) * width:.3g}")
        for i, n in enumerate(counts)
    ]


def integer_histogram(values: list[int], *, max_bars: int = MAX_TURN_BARS) -> list[Bin]:
    """One bar per integer from min to max (empty ones included), or equal-width bins if too many."""
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi - lo + 1 > max_bars:
        return histogram([float(v) for v in values], bins=max_bars)
    counts = [0] * (hi - lo + 1)
    for value in values:
        counts[value - lo] += 1
    return [Bin(lo + i, lo + i + 1, n, str(lo + i)) for i, n in enumerate(counts)]


def layout(bins: list[Bin], *, title: str, x_label: str, ticks_at_edges: bool) -> SvgHistogram:
    """Bars and axis ticks in SVG coordinates; ticks mark bin edges for ranges, centres for integers."""
    empty = SvgHistogram(title=title, x_label=x_label, bars=[], ticks=[], y_max=0)
    if not bins:
        return empty
    y_max = max(b.count for b in bins) or 1
    slot = empty.plot_width / len(bins)
    bars = []
    for i, b in enumerate(bins):
        height = empty.plot_height * b.count / y_max
        bars.append(
            SvgBar(
                x=round(empty.left + i * slot + 1, 2),
                y=round(empty.baseline - height, 2),
                width=round(max(slot - 2, 1), 2),
                height=round(height, 2),
                count=b.count,
                label=b.label,
            )
        )
    every = math.ceil(len(bins) / 10)
    if ticks_at_edges and len(bins) > 1:
        edges = [b.lo for b in bins] + [bins[-1].hi]
        ticks = [SvgTick(round(empty.left + i * slot, 2), f"{edge:.3g}") for i, edge in enumerate(edges)]
        ticks = ticks[::every] if (len(edges) - 1) % every == 0 else [*ticks[::every], ticks[-1]]
    else:
        ticks = [SvgTick(round(empty.left + (i + 0.5) * slot, 2), b.label) for i, b in enumerate(bins)][
            ::every
        ]
    return SvgHistogram(title=title, x_label=x_label, bars=bars, ticks=ticks, y_max=y_max)


class _ImageBudget:
    """Bytes of image data the report may still embed."""

    def __init__(self, remaining: int) -> None:
        self.remaining = remaining
        self.omitted = 0

    def embed(self, image: ImagePart) -> dict[str, Any]:
        if not image.mime_type.startswith("image/"):
            return {"omitted": f"not an image ({image.mime_type})"}
        url = image.to_data_url()
        if len(url) > self.remaining:
            self.omitted += 1
            return {"omitted": f"{len(image.data):,} bytes left out: the report's image budget is spent"}
        self.remaining -= len(url)
        return {"src": url}


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… ({len(text) - limit:,} more characters left out of the report)"


def _finite(value: float) -> float | None:
    """JSON.parse rejects NaN and Infinity, so they travel as null."""
    return value if math.isfinite(value) else None


def _pretty_arguments(arguments: str) -> tuple[str, bool]:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False), True
    except json.JSONDecodeError:
        return arguments, False


def _message(message: Message, budget: _ImageBudget, max_text: int) -> dict[str, Any]:
    calls = []
    for call in message.tool_calls:
        arguments, valid = _pretty_arguments(call.arguments)
        calls.append(
            {"id": call.id, "name": call.name, "arguments": _cut(arguments, max_text), "valid": valid}
        )
    return {
        "role": message.role,
        "name": message.name,
        "tool_call_id": message.tool_call_id,
        "text": _cut(message.text, max_text),
        "tool_calls": calls,
        "images": [budget.embed(image) for image in message.images],
    }


def _turn(turn: Turn, budget: _ImageBudget, max_text: int) -> dict[str, Any]:
    tokens = None
    if turn.tokens is not None:
        tokens = {
            "prompt": None if turn.tokens.prompt_token_ids is None else len(turn.tokens.prompt_token_ids),
            "completion": len(turn.tokens.completion_token_ids),
            "finish_reason": turn.tokens.finish_reason,
            "sample_break": turn.tokens.sample_break,
        }
    error = turn.info.get("error")
    return {
        "index": turn.index,
        "reward": _finite(turn.reward),
        "action": _message(turn.action, budget, max_text),
        "observation": [_message(m, budget, max_text) for m in turn.observation],
        "error": None if error is None else _cut(str(error), max_text),
        "info": _cut(json.dumps(turn.info, indent=2, default=str, ensure_ascii=False), max_text)
        if turn.info
        else "",
        "tokens": tokens,
    }


def _episode(episode: Episode, budget: _ImageBudget, max_text: int) -> dict[str, Any]:
    return {
        "id": episode.episode_id,
        "env": episode.env_id,
        "env_version": episode.env_version,
        "policy": episode.policy,
        "seed": episode.seed,
        "reward": _finite(episode.reward),
        "components": {k: _finite(v) for k, v in episode.reward_components.items()},
        "ending": episode.ending,
        "error": None
        if episode.error is None
        else {"kind": episode.error.kind, "message": _cut(episode.error.message, max_text)},
        "wall_seconds": _finite(episode.wall_seconds),
        "n_turns": len(episode.turns),
        "provenance": episode.provenance.model_dump(exclude_none=True),
        "prompt": [_message(m, budget, max_text) for m in episode.prompt],
        "turns": [_turn(t, budget, max_text) for t in episode.turns],
    }


def _script_json(data: object) -> Markup:
    """JSON that is safe inside <script>: no `</script>` or `<!--` can form, whatever the text."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return Markup(text)


def _template() -> jinja2.Template:
    source = resources.files(__package__).joinpath("report.html.j2").read_text(encoding="utf-8")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(source)


def batch_wall_seconds(episodes: list[Episode]) -> float | None:
    """The batch's wall time: from the first episode's start to the last one's end, counting only time
    in which some episode was running, so the pause between a killed run and its resume is left out.

    Summing the episodes' own times instead would count every second once per concurrent episode.
    None when no episode recorded its start.
    """
    spans = sorted(
        (e.started_at.timestamp(), e.started_at.timestamp() + e.wall_seconds)
        for e in episodes
        if e.started_at is not None and math.isfinite(e.wall_seconds)
    )
    if not spans:
        return None
    total, (start, end) = 0.0, spans[0]
    for lo, hi in spans[1:]:
        if lo > end:
            total, start = total + end - start, lo
        end = max(end, hi)
    return total + end - start


def render_html(
    episodes: list[Episode],
    *,
    title: str,
    wall_seconds: float | None = None,
    max_image_bytes: int = MAX_IMAGE_BYTES,
    max_text_chars: int = MAX_TEXT_CHARS,
) -> str:
    """The report as one HTML document; `wall_seconds` (the manifest's, when known) defaults to
    `batch_wall_seconds(episodes)`."""
    if not episodes:
        raise ValueError("there are no episodes to report on; run `envhub rollout` to record some first")
    if wall_seconds is None:
        wall_seconds = batch_wall_seconds(episodes)
    summary: BatchSummary = summarize(episodes, wall_seconds=wall_seconds)
    budget = _ImageBudget(max_image_bytes)
    data = [_episode(e, budget, max_text_chars) for e in episodes]
    charts = [
        layout(
            histogram([e.reward for e in episodes], bins=REWARD_BINS),
            title="Reward per episode",
            x_label="reward (return)",
            ticks_at_edges=True,
        ),
        layout(
            integer_histogram([len(e.turns) for e in episodes]),
            title="Turns per episode",
            x_label="turns",
            ticks_at_edges=False,
        ),
    ]
    return _template().render(
        title=title,
        summary=summary,
        envs=sorted({e.env_id for e in episodes}),
        policies=sorted({e.policy for e in episodes}),
        locks=sorted(Counter(e.provenance.lock_hash for e in episodes if e.provenance.lock_hash).items()),
        charts=charts,
        images_omitted=budget.omitted,
        episodes_json=_script_json(data),
    )


def report_path(path: Path) -> Path:
    """Where a report asked for at `path` is written. Inside a batch folder its name gets a leading dot,
    which pandas, pyarrow and Hugging Face `datasets` skip, so the folder stays a readable dataset."""
    for folder in path.parents:
        if manifest_path(folder) is not None:
            first, *rest = path.relative_to(folder).parts
            return path if first.startswith(".") else folder.joinpath(f".{first}", *rest)
    return path


def write_html_report(
    episodes: list[Episode],
    path: Path,
    *,
    title: str,
    wall_seconds: float | None = None,
) -> Path:
    """Write `render_html` to `path` (parents created) and return where it went: `report_path(path)`."""
    path = report_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(episodes, title=title, wall_seconds=wall_seconds), encoding="utf-8")
    return path
