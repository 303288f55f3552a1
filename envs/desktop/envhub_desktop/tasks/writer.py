"""Word-processor tasks in LibreOffice Writer: edit a seeded document and save it; the checker reads
the saved ODF."""

from __future__ import annotations

from envhub_desktop.tasks.base import Task

TASKS: tuple[Task, ...] = ()
