"""Terminal tasks in xterm: any route through the shell counts; the checker reads the files and trees left."""

from __future__ import annotations

from envhub_desktop.tasks.base import Task

TASKS: tuple[Task, ...] = ()
