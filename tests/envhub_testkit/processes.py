"""Ray actor processes found through /proc, for the tests that kill one to check its death is survived."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def ray_actor_pids(name: str) -> set[int]:
    """Processes of Ray actors of class `name` that descend from this process (other sessions' do not),
    found through /proc: a test kills them to check that an actor's death is survived."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if not (entry / "cmdline").read_bytes().startswith(f"ray::{name}".encode()):
                continue
            parent = int(entry.name)
            while parent > 1 and parent != os.getpid():
                parent = int((Path("/proc") / str(parent) / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):  # the process ended while we looked
            continue
        if parent == os.getpid():
            found.add(int(entry.name))
    return found


def interrupt(process: subprocess.Popen[str]) -> None:
    """Stop a server the tests started as Ctrl-C would (uvicorn then shuts down cleanly), killing it if
    it has not exited within 10 s."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
