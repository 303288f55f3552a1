"""Launching Chromium for web tasks: which binary, with which flags, and how to find its process.

The flags keep Chromium off the network on its own account (no background requests, component updates
or sync); the pages it loads are the task's, from loopback, and every other request is blocked per
context by the environment. Its sandbox is switched off only when running as root, where it cannot start.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from playwright.async_api import Browser, Playwright

OFFLINE_FLAGS = (
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--metrics-recording-only",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
)
SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")


def chromium_path() -> str | None:
    """The Chromium to run: `$ENVHUB_CHROMIUM`, else Debian's, else None (Playwright's own download).

    None means `playwright install chromium` must have been run on this machine.
    """
    configured = os.environ.get("ENVHUB_CHROMIUM")
    if configured:
        if configured == "playwright":
            return None
        if not os.access(configured, os.X_OK):
            raise FileNotFoundError(f"ENVHUB_CHROMIUM={configured} is not an executable file")
        return configured
    for candidate in SYSTEM_CHROMIUM:
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium")


async def launch(
    playwright: Playwright, *, sandbox: bool | None = None, start_timeout: float = 60.0
) -> tuple[Browser, str]:
    """Start a headless Chromium and return it with the tag that finds its process (`chromium_pids`).

    `start_timeout` is the seconds Chromium may take to start, generous as a loaded host can be slow to.

    `sandbox=None` follows `$ENVHUB_CHROMIUM_SANDBOX` (0 or 1) if set, else keeps Chromium's sandbox on
    unless running as root, where it cannot start.
    """
    tag = uuid.uuid4().hex
    if sandbox is None and os.environ.get("ENVHUB_CHROMIUM_SANDBOX") in ("0", "1"):
        sandbox = os.environ["ENVHUB_CHROMIUM_SANDBOX"] == "1"  # hosts that forbid user namespaces: 0
    use_sandbox = os.geteuid() != 0 if sandbox is None else sandbox
    browser = await playwright.chromium.launch(
        executable_path=chromium_path(),
        headless=True,
        chromium_sandbox=use_sandbox,
        timeout=start_timeout * 1000,
        args=[*OFFLINE_FLAGS, f"--envhub-browser={tag}"],  # an unknown switch Chromium ignores
    )
    return browser, tag


def chromium_pids(tag: str) -> list[int]:
    """The main Chromium process launched with `tag` (its children die with it)."""
    marker = f"--envhub-browser={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker in arguments and not any(a.startswith(b"--type=") for a in arguments):
            found.append(int(entry.name))
    return found
