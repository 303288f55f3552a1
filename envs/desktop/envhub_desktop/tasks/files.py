"""File-manager tasks in PCManFM: arrange a seeded folder; the checker reads the directory tree."""

from __future__ import annotations

from envhub_desktop.tasks.base import Task

TASKS: tuple[Task, ...] = ()
