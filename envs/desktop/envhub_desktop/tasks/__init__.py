"""Every desktop task, by name, and the tasks of each application family (one module each)."""

from __future__ import annotations

from envhub_desktop.tasks import calc, editor, files, terminal, writer
from envhub_desktop.tasks.base import Episode, Saved, Task

FAMILIES: dict[str, tuple[Task, ...]] = {
    "editor": editor.TASKS,
    "calc": calc.TASKS,
    "terminal": terminal.TASKS,
    "files": files.TASKS,
    "writer": writer.TASKS,
}
"""Application family -> its tasks; each family has an id of its own (`desktop-<family>-v0`)."""

TASKS: dict[str, Task] = {task.name: task for family in FAMILIES.values() for task in family}

__all__ = ["FAMILIES", "TASKS", "Episode", "Saved", "Task"]
