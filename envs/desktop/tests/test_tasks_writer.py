"""The word-processor tasks on the real LibreOffice Writer: every oracle saves what its checker asks for
(two seeds per task), and documents that are wrong, half done or not saved by LibreOffice score 0."""

from __future__ import annotations

import io
import random
import re
import zipfile
from xml.sax.saxutils import escape

import pytest
from envhub_desktop.actions import DesktopAction, Keys, Wait
from envhub_desktop.env import DesktopEnv
from envhub_desktop.odt import fodt, read_blocks, read_text
from envhub_desktop.provenance import saved_by_office
from envhub_desktop.tasks import FAMILIES, TASKS, Episode, Saved
from envhub_desktop.tasks.base import WORDS
from envhub_desktop.tasks.writer import OTHER_WORDS, shapes

from envhub.policies import OraclePolicy
from envhub.rollout import run_episode

pytestmark = pytest.mark.timeout(600)
WRITER = sorted(task.name for task in FAMILIES["writer"])


async def play_oracle(env: DesktopEnv, seed: int) -> float:
    return (await run_episode(env, OraclePolicy(), seed=seed)).reward


@pytest.mark.parametrize("task", WRITER)
async def test_the_oracle_solves_each_writer_task_through_the_gui(task: str) -> None:
    env = DesktopEnv(task=task, spare=False)
    try:
        assert [await play_oracle(env, seed) for seed in (1, 2)] == [1.0, 1.0]
    finally:
        await env.close()


async def test_a_half_done_edit_saved_by_writer_scores_zero_and_the_finished_one_one() -> None:
    """Real LibreOffice saves: only the asked paragraph's first word bold scores 0; undone and redone over
    the whole paragraph, the same episode scores 1."""
    env = DesktopEnv(task="writer-bold-paragraph", spare=False)
    try:
        await env.reset(seed=4)
        assert env.episode is not None and env.desktop is not None
        texts = read_text(seeded(env.episode))
        k = texts.index(re.findall(r"`([^`]*)`", env.episode.goal)[0])
        to_paragraph: list[DesktopAction] = [
            Keys(("ctrl", "Home")),
            *([Keys(("ctrl", "Down"), k)] if k else []),
        ]
        first_word = [*to_paragraph, Keys(("shift", "ctrl", "Right")), Keys(("ctrl", "b"))]
        for action in [*first_word, Keys(("ctrl", "s")), Wait(2.0)]:
            await env.desktop.act(action)
        assert await env.success() == 0.0
        data = await env.desktop.sb.read_file(env.episode.reads[0])
        assert saved_by_office(data)  # Writer did save: the content is what fails
        assert shapes(read_blocks(data))[k] == ("p", texts[k], "mixed")
        for action in [Keys(("ctrl", "z")), *env.episode.oracle]:
            await env.desktop.act(action)
        assert await env.success() == 1.0
    finally:
        await env.close()


# --- the checkers on crafted saves (no desktop) ------------------------------------------------------

GENERATOR = "LibreOffice/7.4.7.2$Linux_X86_64 LibreOffice_project/40$Build-2"
BOLD = (
    '<style:style style:name="P9" style:family="paragraph" style:parent-style-name="Standard">'
    '<style:text-properties fo:font-weight="bold"/></style:style>'
)
BULLETS = '<text:list-style style:name="L1"><text:list-level-style-bullet text:level="1"/></text:list-style>'
NUMBERS = '<text:list-style style:name="L1"><text:list-level-style-number text:level="1"/></text:list-style>'


def office(body: str, automatic: str = "", *, meta: bool = True) -> bytes:
    """A flat ODT as LibreOffice saves one (its generator and editing cycles in office:meta), or, with
    `meta=False`, as a script would write the same content."""
    head = (
        f"<office:meta><meta:generator>{GENERATOR}</meta:generator>"
        "<meta:editing-cycles>1</meta:editing-cycles></office:meta>"
        if meta
        else ""
    )
    seed = fodt([]).replace(
        "<office:styles>",
        f"{head}<office:automatic-styles>{automatic}</office:automatic-styles><office:styles>",
    )
    seed = seed.replace(
        "<office:document ", '<office:document xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" '
    )
    return seed.replace("<office:text></office:text>", f"<office:text>{body}</office:text>").encode()


def paragraphs(texts: list[str], *, bold: int | None = None) -> str:
    return "".join(
        f'<text:p text:style-name="{"P9" if i == bold else "Standard"}">{escape(t)}</text:p>'
        for i, t in enumerate(texts)
    )


def drawn(task: str, seed: int) -> tuple[Episode, list[str], list[str]]:
    """The episode, its seed's paragraphs and the goal's quoted strings."""
    episode = TASKS[task].build(random.Random(seed))
    document = next(iter(episode.files.values()))
    assert isinstance(document, str)
    return episode, read_text(document.encode()), re.findall(r"`([^`]*)`", episode.goal)


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def seeded(episode: Episode) -> bytes:
    document = next(iter(episode.files.values()))
    return document.encode() if isinstance(document, str) else document


def scores(episode: Episode, data: bytes | None) -> bool:
    return episode.check(Saved({path: data for path in episode.reads}))


@pytest.mark.parametrize("task", WRITER)
def test_each_writer_checker_is_total_and_refuses_an_untouched_or_foreign_file(task: str) -> None:
    for seed in range(6):
        episode, texts, _ = drawn(task, seed)
        for data in (None, b"", b"\x00garbage", b"PK\x03\x04junk", b"<" * 10_000, office("")):
            assert scores(episode, data) is False
        assert scores(episode, office(paragraphs(texts))) is False  # re-saved, nothing done
        assert scores(episode, seeded(episode)) is False  # the seed itself


@pytest.mark.parametrize("seed", range(4))
def test_the_right_content_counts_only_when_libreoffice_saved_it(seed: int) -> None:
    episode, texts, (new,) = drawn("writer-append-paragraph", seed)
    assert scores(episode, office(paragraphs([*texts, new])))
    assert scores(episode, office(paragraphs([*texts, "", new, ""])))  # empty paragraphs are layout
    assert not scores(episode, office(paragraphs([*texts, new]), meta=False))  # written by a script
    assert not scores(episode, office(paragraphs([new, *texts])))
    assert not scores(episode, office(paragraphs([*texts, new + "!"])))
    assert not scores(episode, office(paragraphs([*texts, new], bold=len(texts)), BOLD))


@pytest.mark.parametrize("seed", range(4))
def test_replace_counts_only_every_occurrence_replaced(seed: int) -> None:
    episode, texts, (old, new) = drawn("writer-replace-word", seed)
    replaced = [" ".join(new if w == old else w for w in t[:-1].split()) + "." for t in texts]
    assert scores(episode, office(paragraphs(replaced)))
    hits = [i for i, t in enumerate(texts) if old in t.split() or old + "." in t.split()]
    half = [replaced[i] if i != hits[-1] else texts[i] for i in range(len(texts))]
    assert not scores(episode, office(paragraphs(half)))


@pytest.mark.parametrize("seed", range(4))
def test_bold_counts_only_the_one_paragraph_all_bold(seed: int) -> None:
    episode, texts, (target,) = drawn("writer-bold-paragraph", seed)
    k = texts.index(target)
    assert scores(episode, office(paragraphs(texts, bold=k), BOLD))
    assert not scores(episode, office(paragraphs(texts, bold=(k + 1) % len(texts)), BOLD))
    half = paragraphs(texts).replace(
        escape(target), f'<text:span text:style-name="T9">{target[:5]}</text:span>{escape(target[5:])}'
    )
    assert not scores(episode, office(half, BOLD.replace("P9", "T9").replace('"paragraph"', '"text"')))


@pytest.mark.parametrize("seed", range(4))
def test_the_list_counts_only_bulleted_and_over_the_asked_paragraphs(seed: int) -> None:
    episode, texts, (first, last) = drawn("writer-bullet-list", seed)
    i, j = texts.index(first), texts.index(last) + 1

    def listed(start: int, end: int, style: str) -> bytes:
        items = "".join(
            f"<text:list-item><text:p>{escape(t)}</text:p></text:list-item>" for t in texts[start:end]
        )
        body = paragraphs(texts[:start]) + f'<text:list text:style-name="L1">{items}</text:list>'
        return office(body + paragraphs(texts[end:]), style)

    assert scores(episode, listed(i, j, BULLETS))
    assert not scores(episode, listed(i, j, NUMBERS))
    assert not scores(episode, listed(i, j - 1, BULLETS))


@pytest.mark.parametrize("seed", range(4))
def test_the_heading_counts_only_at_level_one_above_the_text(seed: int) -> None:
    episode, texts, (title,) = drawn("writer-heading", seed)
    for level, where, ok in ((1, 0, True), (2, 0, False), (1, 1, False)):
        body = [paragraphs([t]) for t in texts]
        body.insert(where, f'<text:h text:outline-level="{level}">{escape(title)}</text:h>')
        assert scores(episode, office("".join(body))) is ok


@pytest.mark.parametrize("seed", range(4))
def test_the_table_counts_only_with_every_cell_right(seed: int) -> None:
    episode, texts, quoted = drawn("writer-insert-table", seed)
    cells = quoted[-4:]

    def table(values: list[str]) -> bytes:
        row = "<table:table-row>{}</table:table-row>"
        cell = "<table:table-cell><text:p>{}</text:p></table:table-cell>"
        rows = "".join(row.format(cell.format(a) + cell.format(b)) for a, b in (values[:2], values[2:]))
        return office(paragraphs(texts) + f"<table:table>{rows}</table:table><text:p/>")

    assert scores(episode, table(cells))
    assert not scores(episode, table([*cells[:3], cells[3] + "0"]))
    assert not scores(episode, office(paragraphs([*texts, *cells])))


@pytest.mark.parametrize("seed", range(4))
def test_the_text_copy_counts_only_with_every_line(seed: int) -> None:
    episode, texts, _ = drawn("writer-save-as-text", seed)
    assert scores(episode, ("\ufeff" + "\n".join(texts) + "\n").encode())
    assert not scores(episode, ("\n".join(texts[1:]) + "\n").encode())
    assert not scores(episode, seeded(episode))


@pytest.mark.parametrize("seed", range(4))
def test_the_odt_copy_counts_only_zipped_with_the_new_first_paragraph(seed: int) -> None:
    episode, texts, quoted = drawn("writer-save-as-odt", seed)
    flat = office(paragraphs([quoted[0], *texts]))
    assert scores(episode, zipped({"content.xml": flat, "meta.xml": flat}))
    assert not scores(episode, flat)  # the seed's flat format under the .odt name
    wrong = office(paragraphs([*texts, quoted[0]]))
    assert not scores(episode, zipped({"content.xml": wrong, "meta.xml": wrong}))


def test_no_word_a_task_types_is_long_enough_for_writers_word_completion() -> None:
    """Writer collects words of 8 letters or more and completes them on Return: none may be typed."""
    assert max(len(word) for word in [*WORDS, *OTHER_WORDS, "Item", "Count"]) < 8
