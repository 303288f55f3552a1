"""The Calc tasks on real parts: each oracle drives the real LibreOffice Calc in the sandboxed desktop to
1.0; the file it saved, rewritten with the same cells by a program (as a terminal could) or with one value
spoiled, scores 0; the checkers refuse crafted bytes without raising; and the prepared profile runs no
macro: a Basic macro run through the real Basic Macros dialog writes its file only on a profile without
the lockdown layer."""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from envhub_desktop.actions import Click, DesktopAction, Keys
from envhub_desktop.desktop import Desktop
from envhub_desktop.env import DesktopEnv
from envhub_desktop.odf import Cell, fods, fods_book, read_cells, sheet_names
from envhub_desktop.office import OFFICE_OPTIONS, PROFILE_DIR, built_profile
from envhub_desktop.tasks import FAMILIES
from envhub_desktop.tasks.base import Episode, Saved
from envhub_desktop.tasks.calc import _book_is, csv_is

from envhub.core import InfrastructureError
from envhub.messages import Message

pytestmark = pytest.mark.timeout(600)
CALC = sorted(task.name for task in FAMILIES["calc"])
LO_META = (
    "<office:meta><meta:editing-cycles>{cycles}</meta:editing-cycles>"
    "<meta:generator>LibreOffice/7.4.7.2$Linux_X86_64 LibreOffice_project/40$Build-2</meta:generator>"
    "</office:meta>"
)


def as_office_save(document: str, cycles: int = 1) -> bytes:
    """A flat document carrying the office:meta LibreOffice 7.4 writes on a save (for checker units)."""
    meta = 'xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" office:version='
    return (
        document.replace("office:version=", meta, 1)
        .replace("<office:body>", LO_META.format(cycles=cycles) + "<office:body>", 1)
        .encode()
    )


async def play(task: str, seed: int) -> tuple[float, dict[str, bytes | None], Episode]:
    """The oracle's reward, the files the checker read, and the episode."""
    env = DesktopEnv(task=task, spare=False)
    try:
        messages, _ = await env.reset(seed=seed)
        history = list(messages)
        while True:
            action = env.reference_action(history)
            assert isinstance(action, Message)
            result = await env.step(action)
            history += [action, *result.observation]
            if result.terminated or result.truncated:
                break
        assert env.episode is not None and env.desktop is not None
        files: dict[str, bytes | None] = {
            path: await env.desktop.sb.read_file(path) for path in env.episode.reads
        }
        return result.reward, files, env.episode
    finally:
        await env.close()


def forged(data: bytes) -> bytes:
    """The same sheets and cells, written by a program (our own fods writer), not by LibreOffice."""
    sheets = []
    for i, name in enumerate(sheet_names(data)):
        grid = read_cells(data, rows=20, columns=8, sheet=i)
        rows = [[*row] for row in grid if any(v is not None for v in row)]
        width = max(
            (max((j for j, v in enumerate(row) if v is not None), default=-1) for row in rows), default=-1
        )
        sheets.append((name, [row[: width + 1] for row in rows]))
    return fods_book(sheets).encode()


def spoiled(data: bytes) -> bytes:
    """The saved file with its last number one more: a value the task did not ask for."""
    matches = list(re.finditer(rb'office:value="(\d+)"', data))
    if not matches:  # CSV: the last number of the text
        matches = list(re.finditer(rb"(\d+)", data))
    last = matches[-1]
    return data[: last.start(1)] + str(int(last.group(1)) + 1).encode() + data[last.end(1) :]


@pytest.mark.parametrize("task", CALC)
async def test_the_oracle_scores_1_and_a_forged_or_spoiled_save_scores_0(task: str) -> None:
    """Seed 11 here, seed 3 in test_desktop.py: two seeds per task in the run."""
    reward, files, episode = await play(task, seed=11)
    assert reward == 1.0
    check = episode.check
    (path, data), *_ = files.items()
    assert data is not None and check(Saved(files))
    assert not check(Saved({path: spoiled(data)}))
    if not path.endswith(".csv"):
        assert not check(Saved({path: forged(data)})), "a file a program wrote passed a 'use Calc' task"
        assert not check(Saved({path: as_office_save(forged(data).decode())[:-40]}))  # cut short


@pytest.mark.parametrize("task", CALC)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_seed_as_left_and_junk_score_0_without_raising(task: str, seed: int) -> None:
    task_ = next(t for t in FAMILIES["calc"] if t.name == task)
    episode = task_.build(random.Random(seed))
    (path,) = episode.reads
    seeded = next(iter(episode.files.values()))
    seed_bytes = seeded.encode() if isinstance(seeded, str) else seeded
    for data in [
        seed_bytes,  # nothing done, or not saved
        as_office_save(seed_bytes.decode(), cycles=1),  # saved by Calc unchanged
        None,
        b"",
        b"PK\x03\x04garbage",
        b"\x00" * 64,
        b"<office:document/>",
        b"<a>" * 100_000,
        "a,b\n" * 300_000,
    ]:
        raw = data.encode() if isinstance(data, str) else data
        assert episode.check(Saved({path: raw})) is False


def test_episodes_differ_by_seed() -> None:
    for task in FAMILIES["calc"]:
        goals = {task.build(random.Random(seed)).goal for seed in range(6)}
        seeds = {repr(sorted(task.build(random.Random(seed)).files.items())) for seed in range(6)}
        assert len(goals | seeds) > 2, task.name


def header_doc(bold: list[bool]) -> str:
    """A flat ODS of a header row (bold where asked, through an automatic cell style as Calc writes it)
    and one row of numbers."""
    ns = "urn:oasis:names:tc:opendocument:xmlns"
    styled = ' table:style-name="ce1"'
    header = "".join(
        f'<table:table-cell{styled if b else ""} office:value-type="string">'
        f"<text:p>h{i}</text:p></table:table-cell>"
        for i, b in enumerate(bold)
    )
    numbers = "".join(
        f'<table:table-cell office:value-type="float" office:value="{n}"><text:p>{n}</text:p>'
        "</table:table-cell>"
        for n in (1, 2)
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document xmlns:office="{ns}:office:1.0" '
        f'xmlns:table="{ns}:table:1.0" xmlns:text="{ns}:text:1.0" xmlns:style="{ns}:style:1.0" '
        f'xmlns:fo="{ns}:xsl-fo-compatible:1.0" office:version="1.3">'
        '<office:automatic-styles><style:style style:name="ce1" style:family="table-cell">'
        '<style:text-properties fo:font-weight="bold"/></style:style></office:automatic-styles>'
        '<office:body><office:spreadsheet><table:table table:name="Sheet1">'
        f"<table:table-row>{header}</table:table-row><table:table-row>{numbers}</table:table-row>"
        "</table:table></office:spreadsheet></office:body></office:document>"
    )


def test_the_bold_checker_reads_cell_styles() -> None:
    seed = fods([["h0", "h1"], [1, 2]])
    rows: list[list[Cell]] = [["h0", "h1"], [1, 2]]
    check = _book_is("/w.fods", seed, [("Sheet1", rows)], header_bold=2)
    assert read_cells(as_office_save(header_doc([True, True])), rows=2, columns=2) == rows
    assert check(Saved({"/w.fods": as_office_save(header_doc([True, True]))}))
    assert not check(Saved({"/w.fods": as_office_save(header_doc([True, False]))}))
    assert not check(Saved({"/w.fods": as_office_save(header_doc([False, False]))}))
    assert not check(Saved({"/w.fods": header_doc([True, True]).encode()}))  # not saved by Calc


def test_the_csv_checker_is_exact() -> None:
    check = csv_is([["item", "cost"], ["tea", 5]], "/o.csv")
    assert check(Saved({"/o.csv": b"item,cost\ntea,5\n"}))
    assert check(Saved({"/o.csv": b'"item","cost"\r\n"tea",5\r\n'}))
    for bad in [
        b"item,cost\n",
        b"item;cost\ntea;5\n",
        b"item,cost\ntea,6\n",
        b"item,cost\ntea,5\nx,1\n",
        b"\xff",
    ]:
        assert not check(Saved({"/o.csv": bad}))
    assert not check(Saved({"/o.csv": None}))


MACRO = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<!DOCTYPE script:module PUBLIC "-//OpenOffice.org//DTD OfficeDocument 1.0//EN" "module.dtd">\n'
    '<script:module xmlns:script="http://openoffice.org/2000/script" script:name="Module1" '
    'script:language="StarBasic">Sub Main\nOpen &quot;/work/macro-ran&quot; For Output As #1\n'
    "Print #1, &quot;ran&quot;\nClose #1\nEnd Sub</script:module>"
)
RUN_MY_MACRO: list[DesktopAction] = [
    Keys(("alt", "F11")),  # Tools > Macros > Organize Macros > Basic: the Basic Macros dialog
    Click(382, 277),  # expand "My Macros" (the dialog sits centred on the 1280x800 screen)
    Keys(("Down",)),  # Standard
    Keys(("Right",)),  # expand it
    Keys(("Down",)),  # Module1: its Main is listed and selected
    Click(857, 589),  # Run
]


USER_UNDO = "".join(
    '<item oor:path="/org.openoffice.Office.Commands/Execute/Disabled">'
    f'<node oor:name="{name}" oor:op="remove"/></item>\n'
    for name in ("MacroDialog", "RunMacro", "BasicIDEAppear")
) + (
    '<item oor:path="/org.openoffice.Office.Common/Security/Scripting">'
    '<prop oor:name="DisableMacrosExecution" oor:op="fuse"><value>false</value></prop></item>\n'
)
"""What Tools > Options or the Expert Configuration would write to undo the lockdown: user-layer items."""


async def macro_ran(locked: bool, undone_by_user: bool = False, finalized: bool = True) -> bool:
    """Plant a Basic macro in "My Macros" of a copy of the prepared profile (without its lockdown layer
    unless `locked`; with user-layer settings undoing it if `undone_by_user`; the layer's values not
    finalized unless `finalized`), open a sheet, run the macro through the Basic Macros dialog, and say
    whether the file it writes appeared."""
    profile = Path(tempfile.mkdtemp(prefix="envhub-test-macro-"))
    try:
        shutil.copytree(await built_profile(), profile, dirs_exist_ok=True)
        (profile / "user/basic/Standard/Module1.xba").write_text(MACRO)
        if not locked:
            shutil.rmtree(profile / "lockdown", ignore_errors=True)
        for layer in (profile / "lockdown").rglob("*.xcu"):
            if not finalized:
                layer.write_text(layer.read_text().replace(' oor:finalized="true"', ""))
        if undone_by_user:
            user = profile / "user/registrymodifications.xcu"
            user.write_text(user.read_text().replace("</oor:items>", USER_UNDO + "</oor:items>"))
        async with Desktop() as desktop:
            await desktop.sb.upload_dir(profile, PROFILE_DIR)
            desktop.office_profile = True
            await desktop.sb.write_file("/work/a.fods", fods([["x"]]))
            await desktop.launch(
                ["soffice", "--calc", *OFFICE_OPTIONS, "/work/a.fods"], window="a.fods", within=90
            )
            await desktop.wait_still()
            await desktop.act(RUN_MY_MACRO[0])
            with contextlib.suppress(InfrastructureError):  # the locked profile shows no dialog
                await desktop.wait_for_window("BASIC Macros", within=10)
            await desktop.wait_still()
            for action in RUN_MY_MACRO[1:]:
                await desktop.act(action)
                await asyncio.sleep(0.5)  # the tree expands; Run is enabled once Main is selected
            for _ in range(20):  # the macro writes at once; a loaded machine may take a while
                if (await desktop.sb.exec(["test", "-e", "/work/macro-ran"])).exit_code == 0:
                    return True
                await asyncio.sleep(0.25)
            return False
    finally:
        shutil.rmtree(profile, ignore_errors=True)


async def test_the_prepared_profile_runs_no_macro_through_the_gui() -> None:
    assert await macro_ran(locked=False), "the control did not run the macro: the GUI route changed"
    assert not await macro_ran(locked=True), "a Basic macro ran on the prepared profile"
    assert await macro_ran(locked=True, undone_by_user=True, finalized=False), "the undo did not undo"
    assert not await macro_ran(locked=True, undone_by_user=True), "the user's own settings undid the lockdown"
