"""docs/computer-use.md lists every desktop task with its app, as the code has it: a task added or
renamed without its row fails here."""

from __future__ import annotations

import re
from pathlib import Path

from envhub_desktop.tasks import FAMILIES, TASKS

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "computer-use.md"


def test_the_guide_lists_every_task_with_its_app() -> None:
    rows = dict(re.findall(r"^\| `([a-z0-9-]+)` \| ([a-z-]+) \|", GUIDE.read_text(), flags=re.M))
    listed = {name: app for name, app in rows.items() if name.split("-")[0] in FAMILIES}
    assert listed == {name: task.app for name, task in TASKS.items()}


def test_the_guide_counts_each_family() -> None:
    text = GUIDE.read_text()
    assert f"all {len(TASKS)}, drawn by the seed" in text
    for family, tasks in FAMILIES.items():
        assert re.search(rf"^\| `desktop-{family}-v0` \| {len(tasks)} in ", text, flags=re.M), family
