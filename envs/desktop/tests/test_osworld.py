"""OSWorld-style task files on the real desktop: the test tasks under data/osworld load, their
`envhub_oracle` solves each through the GUI, doing nothing scores 0, and what the loader does not
support is refused when the file loads, naming the field and the fix."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import openpyxl  # type: ignore[import-untyped,unused-ignore]
import pytest
from envhub_desktop.odf import fods
from envhub_desktop.osworld import OsworldDesktopEnv, OsworldTaskError, load_task, load_tasks, sandbox_path
from envhub_desktop.osworld_eval import Expected, UnsupportedEvaluator, metric, sheets
from envhub_desktop.tasks.base import Saved

import envhub
from envhub.checks import acheck
from envhub.messages import Message, ToolCall

pytestmark = pytest.mark.timeout(600)

DATA = Path(__file__).parent / "data" / "osworld"
TASK_IDS = sorted(task.name for task in load_tasks(DATA))


async def play(env: OsworldDesktopEnv, *, oracle: bool) -> float:
    messages, _ = await env.reset(seed=0)
    history = list(messages)
    while True:
        action = env.reference_action(history) if oracle else done()
        assert isinstance(action, Message)
        result = await env.step(action)
        history += [action, *result.observation]
        if result.terminated or result.truncated:
            return result.reward


def done() -> Message:
    return Message(role="assistant", tool_calls=[ToolCall.create("done", {}, id="call_done")])


def test_the_test_tasks_load_over_two_apps_with_their_oracles() -> None:
    tasks = load_tasks(DATA)
    assert len(tasks) >= 5
    assert {t.app for t in tasks} == {"mousepad", "libreoffice-calc", "pcmanfm", "xterm"}
    assert all(t.oracle_code for t in tasks)
    one = next(t for t in tasks if t.name == "notes-append").build(None)  # type: ignore[arg-type]
    assert one.files == {"/work/Documents/notes.txt": b"apples\nbread\n"}
    assert one.app == ["mousepad", "/work/Documents/notes.txt"] and one.reads == (
        "/work/Documents/notes.txt",
    )


@pytest.mark.parametrize("task", TASK_IDS)
async def test_each_tasks_oracle_scores_1_and_doing_nothing_scores_0(task: str) -> None:
    env = envhub.make("desktop-osworld", task=task, tasks=str(DATA), spare=False)
    assert isinstance(env, OsworldDesktopEnv)
    try:
        assert await play(env, oracle=True) == 1.0
        assert env.reset_info()["task"] == task
        assert await play(env, oracle=False) == 0.0
    finally:
        await env.close()


async def test_envhub_check_passes_on_the_xlsx_task() -> None:
    """The arrival check (determinism, oracle, random, store) on the task whose first screen needed the
    longer still-screen wait: Calc importing an .xlsx (`Task.first_screen_quiet`)."""
    report = await acheck(
        "desktop-osworld", seeds=2, episodes=2, env_kwargs={"tasks": str(DATA), "task": "prices-fill-cell"}
    )
    assert report.passed, [(r.name, r.detail) for r in report.failures]


def test_paths_in_the_vm_home_map_to_the_sandbox_work_folder_and_others_are_refused() -> None:
    assert sandbox_path("/home/user/Desktop/a.xlsx", "p") == "/work/Desktop/a.xlsx"
    assert sandbox_path("~/a.txt", "p") == "/work/a.txt"
    for outside in ("/etc/passwd", "/home/user/../root/x", "/home/username/x", "relative.txt"):
        with pytest.raises(OsworldTaskError, match="outside the VM user's home /home/user"):
            sandbox_path(outside, "p")


@pytest.mark.parametrize(
    ("command", "app", "argv_start", "window"),
    [
        (
            ["mousepad", "/home/user/Documents/notes.txt"],
            "mousepad",
            ["mousepad", "/work/Documents/notes.txt"],
            r"notes\.txt",
        ),
        ("libreoffice --writer", "libreoffice-writer", ["soffice", "--writer"], "Untitled"),
        (
            ["soffice", "--calc", "~/Documents/notes.txt"],
            "libreoffice-calc",
            ["soffice", "--calc"],
            r"notes\.txt",
        ),
        (
            ["/usr/bin/pcmanfm", "~/Documents"],
            "pcmanfm",
            ["pcmanfm", "--no-desktop", "/work/Documents"],
            "^Documents$",
        ),
        (["xterm"], "xterm", ["xterm", "-T", "Terminal"], "^Terminal$"),
    ],
)
def test_launch_starts_the_desktops_own_apps_on_mapped_paths(
    tmp_path: Path, command: Any, app: str, argv_start: list[str], window: str
) -> None:
    path = task_file(tmp_path, set_step(1, {"type": "launch", "parameters": {"command": command}}))
    task = load_task(path)
    episode = task.build(None)  # type: ignore[arg-type]
    assert task.app == app and episode.window == window
    assert episode.app[: len(argv_start)] == argv_start


def task_file(tmp_path: Path, change: Any) -> Path:
    """A copy of the notes-append test task (and its files), changed by `change(task)`."""
    task = json.loads((DATA / "notes-append.json").read_text())
    task = copy.deepcopy(task)
    change(task)
    (tmp_path / "files").mkdir(exist_ok=True)
    for name in ("notes.txt", "notes_expected.txt"):
        (tmp_path / "files" / name).write_bytes((DATA / "files" / name).read_bytes())
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task))
    return path


def set_step(n: int, step: dict[str, Any]) -> Any:
    def change(task: dict[str, Any]) -> None:
        task["config"][n] = step

    return change


def set_evaluator(**fields: Any) -> Any:
    def change(task: dict[str, Any]) -> None:
        task["evaluator"].update(fields)

    return change


REFUSED = [
    (
        set_step(
            0, {"type": "download", "parameters": {"files": [{"url": "https://x.test/a.txt", "path": "~/a"}]}}
        ),
        r"config\[0\]\.files\[0\]\.url: 'https://x.test/a.txt' is a URL.*download the file",
    ),
    (
        set_step(0, {"type": "execute", "parameters": {"command": ["python", "-c", "print(1)"]}}),
        r"config\[0\]: execute steps are refused.*upload_file",
    ),
    (
        set_step(0, {"type": "chrome_open_tabs", "parameters": {}}),
        r"step type 'chrome_open_tabs' is not supported",
    ),
    (
        set_step(1, {"type": "launch", "parameters": {"command": ["bash", "-c", "id"]}}),
        r"config\[1\]: 'bash' is not one of the desktop's apps",
    ),
    (
        set_step(1, {"type": "launch", "parameters": {"command": "mousepad ~/x", "shell": True}}),
        r"shell=true is refused",
    ),
    (
        set_step(1, {"type": "launch", "parameters": {"command": ["soffice", "--headless", "~/x.ods"]}}),
        r"\['--headless', '~/x.ods'\] is not supported; soffice takes one of --calc or --writer",
    ),
    (
        set_step(1, {"type": "launch", "parameters": {"command": ["xterm", "/home/user/Documents"]}}),
        r"xterm takes no path",
    ),
    (set_step(1, {"type": "sleep", "parameters": {"seconds": 1}}), r"config has no open or launch step"),
    (
        set_step(1, {"type": "open", "parameters": {"path": "/home/user/missing.txt"}}),
        r"not put there by an earlier download or upload_file step",
    ),
    (
        set_step(
            0, {"type": "upload_file", "parameters": {"files": [{"local_path": "../secret", "path": "~/a"}]}}
        ),
        r"config\[0\]\.files\[0\]\.local_path: '\.\./secret' lies outside the task folder",
    ),
    (
        set_evaluator(expected={"type": "cloud_file", "path": "/etc/hostname"}),
        r"evaluator.expected.path: '/etc/hostname' lies outside the task folder",
    ),
    (
        set_evaluator(func="compare_docx_files"),
        r"evaluator.func 'compare_docx_files' is not supported.*compare_table",
    ),
    (set_evaluator(func="infeasible"), r"infeasible is not supported"),
    (
        set_evaluator(result={"type": "vm_command_line", "command": "ls"}),
        r"evaluator.result: result type 'vm_command_line' is not supported.*vm_file",
    ),
    (
        set_evaluator(expected={"type": "cloud_file", "path": "https://x.test/gold.txt"}),
        r"evaluator.expected.path: 'https://x.test/gold.txt' is a URL",
    ),
    (
        set_evaluator(
            postconfig=[{"type": "execute", "parameters": {"command": ["xdotool", "key", "ctrl+s"]}}]
        ),
        r"evaluator.postconfig: only sleep steps",
    ),
    (
        set_evaluator(options={"fuzzy": True}),
        r"evaluator.options of compare_text_file.*ignore_blanks, ignore_case",
    ),
    (
        lambda task: task.update(envhub_oracle=["import os\nos.system('id')"]),
        r"envhub_oracle\[0\]: line 1: only `import pyautogui`.*not import os",
    ),
]


@pytest.mark.parametrize(("change", "message"), REFUSED)
def test_what_the_loader_does_not_support_is_refused_naming_the_field(
    tmp_path: Path, change: Any, message: str
) -> None:
    path = task_file(tmp_path, change)
    with pytest.raises(OsworldTaskError, match=message) as raised:
        load_task(path)
    assert str(path) in str(raised.value)


def test_the_env_needs_a_tasks_path_and_a_known_task(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give tasks=PATH"):
        OsworldDesktopEnv()
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        OsworldDesktopEnv("nope", tasks=str(DATA))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for sub in ("a", "b"):
        task_file(tmp_path / sub, lambda task: None)
    with pytest.raises(OsworldTaskError, match="task id 'notes-append' is in both"):
        load_tasks(tmp_path)


# --- the metrics on crafted bytes (no desktop) --------------------------------------------------------


def judge(func: str, expected: Expected | None, options: Any = None) -> Any:
    return metric(func, expected, options)


def test_text_metrics_follow_osworlds_semantics() -> None:
    inc = judge("check_include_exclude", Expected(rules={"include": ["a"], "exclude": ["b"]}))
    assert inc(b"xa", "f.txt") and not inc(b"ab", "f.txt") and not inc(b"x", "f.txt")
    exact = judge("exact_match", Expected(rules={"expected": "done\n"}))
    assert exact(b"done\n", "f") and not exact(b"done", "f") and not exact(None, "f")
    text = judge("compare_text_file", Expected(data=b"A  b\n"), {"ignore_blanks": True, "ignore_case": True})
    assert text(b"a b", "f") and not text(b"a c", "f")
    lines = judge("compare_csv", Expected(data=b"a,b\n1,2\n"), {"strict": False})
    assert lines(b"a,b \n1,2", "f.csv") and not lines(b"a,b\n2,1\n", "f.csv")
    rows = judge("check_csv", Expected(rules={"expect": [{"n": "1"}], "unexpect": [{"n": "2"}]}))
    assert rows(b"n,m\n1,x\n", "f.csv") and not rows(b"n\n1\n2\n", "f.csv") and not rows(b"n\n3\n", "f.csv")
    listed = judge("check_list", Expected(rules={"expect": ["^ok$"], "unexpect": ["bad"]}))
    assert listed(b"x\nok\n", "f") and not listed(b"ok\nbad\n", "f")


def test_checkers_are_total_on_garbage_bytes() -> None:
    garbage = [b"", b"\xff\xfe\x00junk", b"PK\x03\x04 not a zip", b"<xml", b"a,b\n\xff"]
    judges = [
        judge("compare_text_file", Expected(data=b"x")),
        judge("check_csv", Expected(rules={"expect": [{"a": "1"}]})),
        judge("compare_table", Expected(data=fods([["a"]]).encode(), name="e.fods")),
        judge(
            "compare_table",
            None,
            {
                "rules": [
                    {
                        "type": "check_cell",
                        "sheet_idx": 0,
                        "coordinate": "A1",
                        "props": {"value": {"method": "eq", "ref": 1}},
                    }
                ]
            },
        ),
    ]
    for j in judges:
        for name in ("r.fods", "r.ods", "r.xlsx", "r.csv", "r.txt"):
            assert all(j(data, name) is False for data in garbage)


def xlsx(rows: list[list[Any]], title: str = "Sheet1") -> bytes:
    book = openpyxl.Workbook()
    book.active.title = title
    for row in rows:
        book.active.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_compare_table_reads_cells_of_ods_xlsx_and_csv_alike() -> None:
    rows: list[list[Any]] = [["item", "cost"], ["tea", 3], ["cake", 2.5]]
    assert sheets(fods(rows).encode(), "a.fods") == [("Sheet1", rows)]
    assert sheets(xlsx(rows), "a.xlsx") == [("Sheet1", rows)]
    assert sheets(b"item,cost\ntea,3\ncake,2.5\n", "a.csv") == [("Sheet1", rows)]
    same = judge("compare_table", Expected(data=xlsx(rows), name="gold.xlsx"))
    assert same(fods(rows).encode(), "out.fods")
    assert not same(fods([*rows, ["more", 1]]).encode(), "out.fods")
    assert not same(
        fods([["item", "cost"], ["tea", "3"], ["cake", 2.5]]).encode(), "out.fods"
    )  # text, not a number
    cell = judge(
        "compare_table",
        None,
        {
            "rules": [
                {
                    "type": "check_cell",
                    "sheet_idx": "RNSheet1",
                    "coordinate": "B3",
                    "props": {"value": {"method": "approx:0.1", "ref": 2.45}},
                }
            ]
        },
    )
    assert cell(xlsx(rows), "x.xlsx") and not cell(xlsx(rows[:2]), "x.xlsx")


def test_metric_arguments_are_checked_at_load_time() -> None:
    with pytest.raises(UnsupportedEvaluator, match="rule type 'chart' is not supported"):
        judge("compare_table", None, {"rules": [{"type": "chart", "sheet_idx0": 0, "sheet_idx1": "EI0"}]})
    with pytest.raises(UnsupportedEvaluator, match="styles are not read"):
        judge(
            "compare_table",
            None,
            {
                "rules": [
                    {
                        "type": "check_cell",
                        "sheet_idx": 0,
                        "coordinate": "A1",
                        "props": {"bold": {"method": "eq", "ref": True}},
                    }
                ]
            },
        )
    with pytest.raises(UnsupportedEvaluator, match="compares with a rule"):
        judge("check_csv", Expected(data=b"x"))
    with pytest.raises(UnsupportedEvaluator, match="not a regular expression"):
        judge("check_list", Expected(rules={"expect": ["("]}))


def test_a_do_nothing_saved_state_fails_each_test_tasks_checker() -> None:
    """The seeded files as they start (nothing done) fail every checker: the checkers are strict."""
    for task in load_tasks(DATA):
        episode = task.build(None)  # type: ignore[arg-type]
        seeded = {path: data for path, data in episode.files.items() if isinstance(data, bytes)}
        saved = Saved({path: seeded.get(path) for path in episode.reads})
        assert episode.check(saved) is False, task.name


def test_a_symlink_out_of_the_task_folder_is_refused(tmp_path: Path) -> None:
    """What the link points at counts, not its name: a task set copies in only its own files."""
    path = task_file(tmp_path, lambda task: None)
    (tmp_path / "files" / "notes.txt").unlink()
    (tmp_path / "files" / "notes.txt").symlink_to("/etc/hostname")
    with pytest.raises(OsworldTaskError, match=r"'files/notes\.txt' lies outside the task folder"):
        load_task(path)
