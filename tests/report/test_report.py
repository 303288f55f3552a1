"""The viewing side of `envhub show`: the HTML report and the terminal episode printer."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from rich.console import Console

from envhub.display import print_episode
from envhub.messages import ImagePart, Message, TextPart, ToolCall, assistant, system, tool_result, user
from envhub.policies.base import TokenTrace
from envhub.records import Episode, EpisodeError, Turn
from envhub.report import render_html, write_html_report
from envhub.report.html import histogram, integer_histogram

SCRIPT = "<script>alert(1)</script>"
BREAKOUT = "</script><script>document.title='pwned'</script>"
ONERROR = "<img src=x onerror=\"document.title='pwned'\">"


def png(color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (6, 4), color).save(buffer, format="PNG")
    return buffer.getvalue()


def make_episode(
    episode_id: str,
    reward: float,
    *,
    turns: int = 1,
    seed: int = 0,
    agent_text: str = "let me compute",
    error: EpisodeError | None = None,
    image: bytes | None = None,
) -> Episode:
    prompt_content: str | list[TextPart | ImagePart] = "What is 6 * 7?"
    if image is not None:
        prompt_content = [TextPart(text="What is on the screen?"), ImagePart(data=image)]
    made = [
        Turn(
            index=i,
            action=assistant(agent_text, [ToolCall.create("multiply", {"x": 6, "y": 7}, id=f"call_{i}")]),
            observation=[tool_result(f"call_{i}", "42", name="multiply"), user("now answer")],
            reward=reward / turns,
            info={"error": "bad arguments for multiply"} if i == 0 and error is None else {"step": i},
            tokens=TokenTrace(prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5], finish_reason="stop"),
        )
        for i in range(turns)
    ]
    return Episode(
        episode_id=episode_id,
        env_id="arithmetic-v0",
        env_version=0,
        seed=seed,
        policy="scripted",
        prompt=[system("You are careful."), user(prompt_content)],
        turns=made,
        reward=reward,
        reward_components={"exact": reward, "format": 1.0},
        terminated=error is None,
        error=error,
        wall_seconds=0.5,
    )


@pytest.fixture
def episodes() -> list[Episode]:
    rewards = [0.0, 0.0, 0.0, 0.5, 1.0, 1.0]
    out = [make_episode(f"ep-{i}", r, turns=i % 3 + 1, seed=i) for i, r in enumerate(rewards)]
    out[0] = make_episode("ep-0", 0.0, turns=1, seed=0, image=png())
    out[1] = make_episode("ep-1", 0.0, turns=2, seed=1, agent_text=f"{SCRIPT} {BREAKOUT} {ONERROR}")
    out[2] = make_episode(
        "ep-2", 0.0, turns=0, seed=2, error=EpisodeError(kind="env_error", message="sandbox died <b>hard</b>")
    )
    return out


class _Tags(HTMLParser):
    """Every start tag of a document, with its attributes, as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def embedded_episodes(html: str) -> list[dict[str, Any]]:
    match = re.search(r'<script type="application/json" id="episodes-data">(.*?)</script>', html, re.DOTALL)
    assert match, "the episode data block is missing"
    data: list[dict[str, Any]] = json.loads(match.group(1))
    return data


def bars(html: str, title: str) -> list[int]:
    figure = re.search(rf"<figcaption>{title}</figcaption>\s*<svg(.*?)</svg>", html, re.DOTALL)
    assert figure, f"no histogram titled {title!r}"
    return [int(n) for n in re.findall(r'<rect class="bar"[^>]*data-count="(\d+)"', figure.group(1))]


def test_report_is_self_contained(episodes: list[Episode]) -> None:
    html = render_html(episodes, title="arithmetic run")
    for tag, attrs in tags(html):
        for name in ("src", "href"):
            value = attrs.get(name) or ""
            assert not value.startswith(("http:", "https:", "//")), f"<{tag} {name}={value!r}> is external"
        assert tag != "link", "stylesheets must be inline"
    assert not re.search(r"https?://", html), "the report must not reference the network at all"
    assert "@import" not in html


def test_agent_markup_is_escaped_not_executed(episodes: list[Episode]) -> None:
    html = render_html(episodes, title="<i>run</i>")
    assert "<script>alert(1)" not in html
    assert [tag for tag, _ in tags(html) if tag == "script"] == ["script", "script"], "only the report's own"
    assert not any(tag == "img" for tag, _ in tags(html)), "no image element may come from the data"
    assert "<i>run</i>" not in html and "&lt;i&gt;run&lt;/i&gt;" in html
    # The text is still there, intact, for the page to show as text.
    texts = [turn["action"]["text"] for turn in embedded_episodes(html)[1]["turns"]]
    assert texts[0] == f"{SCRIPT} {BREAKOUT} {ONERROR}"
    assert embedded_episodes(html)[2]["error"] == {"kind": "env_error", "message": "sandbox died <b>hard</b>"}


def test_every_episode_and_turn_is_embedded(episodes: list[Episode]) -> None:
    data = embedded_episodes(render_html(episodes, title="run"))
    assert [e["id"] for e in data] == [e.episode_id for e in episodes]
    assert [e["n_turns"] for e in data] == [len(e.turns) for e in episodes]
    assert [e["ending"] for e in data] == [
        "terminated",
        "terminated",
        "error",
        "terminated",
        "terminated",
        "terminated",
    ]
    turn = data[1]["turns"][0]
    assert turn["reward"] == 0.0 and turn["error"] == "bad arguments for multiply"
    assert turn["action"]["tool_calls"] == [
        {"id": "call_0", "name": "multiply", "arguments": '{\n  "x": 6,\n  "y": 7\n}', "valid": True}
    ]
    assert [m["role"] for m in turn["observation"]] == ["tool", "user"]
    assert turn["observation"][0]["text"] == "42"
    assert turn["tokens"] == {"prompt": 3, "completion": 2, "finish_reason": "stop", "sample_break": None}
    assert data[4]["components"] == {"exact": 1.0, "format": 1.0}


def test_images_are_inline_data_urls(episodes: list[Episode]) -> None:
    html = render_html(episodes, title="run")
    url = ImagePart(data=png()).to_data_url()
    assert url in html
    assert embedded_episodes(html)[0]["prompt"][1]["images"] == [{"src": url}]


def test_images_past_the_budget_are_left_out_with_a_note(episodes: list[Episode]) -> None:
    html = render_html(episodes, title="run", max_image_bytes=10)
    assert "base64," not in html
    assert "omitted" in embedded_episodes(html)[0]["prompt"][1]["images"][0]
    assert "1 image left out" in html


def test_long_texts_are_cut_with_a_note() -> None:
    episode = make_episode("long", 1.0, agent_text="x" * 500)
    data = embedded_episodes(render_html([episode], title="run", max_text_chars=100))
    assert (
        data[0]["turns"][0]["action"]["text"]
        == "x" * 100 + "\n… (400 more characters left out of the report)"
    )


def test_reward_histogram_counts_a_known_distribution(episodes: list[Episode]) -> None:
    html = render_html(episodes, title="run")
    assert bars(html, "Reward per episode") == [3, 0, 0, 0, 0, 1, 0, 0, 0, 2]
    # turns are 1, 2, 0, 1, 2, 3: one bar per count from 0 to 3.
    assert bars(html, "Turns per episode") == [1, 2, 2, 1]
    assert "reward (return)" in html and ">episodes</text>" in html


def test_histogram_bins() -> None:
    assert [b.count for b in histogram([0.0, 0.1, 0.2, 0.3, 1.0], bins=10)] == [1, 1, 1, 1, 0, 0, 0, 0, 0, 1]
    assert [(b.label, b.count) for b in histogram([0.7, 0.7], bins=10)] == [("0.7", 2)]
    assert histogram([float("nan")], bins=10) == []
    assert [b.count for b in integer_histogram([2, 5, 5])] == [1, 0, 0, 2]
    assert len(integer_histogram(list(range(100)), max_bars=30)) == 30


def test_summary_header_uses_the_batch_summary(episodes: list[Episode]) -> None:
    html = render_html(episodes, title="run", wall_seconds=2.0)
    summary = html.split('id="summary"')[1].split("</table>")[0]
    assert "0.417 ± 0.449" in summary  # mean and population std of 0, 0, 0, 0.5, 1, 1
    assert "env_error: 1" in summary
    assert "3.0</td>" in summary  # 6 episodes in 2 s
    unknown = render_html(episodes, title="run").split('id="summary"')[1].split("</table>")[0]
    assert "wall time" not in unknown  # no episode recorded its start: the batch's wall time is unknown


def test_nan_components_still_make_valid_json() -> None:
    episode = make_episode("nan", 1.0).model_copy(update={"reward_components": {"judge": float("nan")}})
    data = embedded_episodes(render_html([episode], title="run"))
    assert data[0]["components"] == {"judge": None}


def test_no_episodes_is_an_error() -> None:
    with pytest.raises(ValueError, match="no episodes"):
        render_html([], title="run")


def test_write_html_report(episodes: list[Episode], tmp_path: Path) -> None:
    path = write_html_report(episodes, tmp_path / "out" / "report.html", title="run")
    assert path.read_text(encoding="utf-8") == render_html(episodes, title="run")


def test_report_renders_in_a_browser_without_running_agent_markup(
    episodes: list[Episode], tmp_path: Path
) -> None:
    """The page's own script builds the view, and agent markup shows as text instead of running."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no chromium to load the report in")
    path = write_html_report(episodes, tmp_path / "report.html", title="run")
    result = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", f"{path.as_uri()}#ep-1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    dom = result.stdout
    assert "<title>run</title>" in dom and "<title>pwned</title>" not in dom, "agent markup ran in the page"
    assert "Episode ep-1" in dom and "Turn 1" in dom, "the episode view did not render"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert all(f'data-id="ep-{i}"' in dom for i in range(6))


def test_print_episode_shows_turns_rewards_and_tokens(episodes: list[Episode]) -> None:
    console = Console(record=True, width=120)
    print_episode(episodes[1], console)
    out = console.export_text()
    header = out.splitlines()[0]
    for part in ("episode ep-1", "seed 1", "arithmetic-v0", "policy scripted", "reward 0.000", "exact=0.000"):
        assert part in header
    assert "terminated" in header
    assert "turn 0 · reward 0.000 · tokens 3 prompt / 2 completion (stop)" in out
    assert "turn 1" in out
    assert SCRIPT in out  # the terminal shows agent text verbatim
    assert '"name": "multiply"' in out and "42" in out and "now answer" in out
    assert "info.error: bad arguments for multiply" in out
    assert "You are careful." in out


def test_print_episode_shows_the_error_of_a_failed_episode(episodes: list[Episode]) -> None:
    console = Console(record=True, width=120)
    print_episode(episodes[2], console)
    out = console.export_text()
    assert "error" in out.splitlines()[0]
    assert "env_error: sandbox died <b>hard</b>" in out
    assert "(no turns)" in out


def test_print_episode_counts_images(episodes: list[Episode]) -> None:
    console = Console(record=True, width=120)
    print_episode(episodes[0], console)
    assert "user · 1 image" in console.export_text()


def test_messages_with_images_survive_the_report() -> None:
    message = Message(role="tool", content=[TextPart(text="screenshot"), ImagePart(data=png((0, 0, 255)))])
    episode = make_episode("vision", 1.0).model_copy(
        update={"turns": [Turn(index=0, action=assistant("look"), observation=[message], reward=1.0)]}
    )
    data = embedded_episodes(render_html([episode], title="run"))
    assert data[0]["turns"][0]["observation"][0]["images"][0]["src"].startswith("data:image/png;base64,")
