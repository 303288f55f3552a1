"""envhub-browser: MiniWoB-style web tasks in headless Chromium, graded from the page's own state."""

from envhub_browser.env import WebTasks
from envhub_browser.tasks import TASKS, WebTask

__all__ = ["TASKS", "WebTask", "WebTasks"]
