"""The trainer process's memory: the peak resident set of each step, and the one thread steps run on.

Peak RSS per step: Linux keeps a process's high-water mark (VmHWM) and lets the process reset it
(`/proc/self/clear_refs`), so each step's peak is read, not guessed from samples. Where the reset is not
available the figure is the process's peak so far (it still shows growth, though never a fall).

Every step runs on one thread (`step_thread`): glibc gives each thread a malloc arena of its own and keeps
the memory freed in it for that arena's next allocations. Steps handed to whichever thread of a pool was
idle left each step's activations (1.5 GiB for SmolLM2-135M) behind in another arena, so RSS grew by about
that much a step (measured: 5.6 GiB after the first step, 12 GiB after six) while the memory in use stayed
flat. One thread reuses its own freed memory every step.
"""

from __future__ import annotations

import concurrent.futures
import re
import resource
import sys
from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")
GIB = 2**30


def reset_peak_rss() -> bool:
    """Start a new high-water mark at the current RSS; False where the system does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")  # 5: reset the peak RSS (Linux 4.0+), nothing else
    except OSError:
        return False
    return True


def peak_rss_bytes() -> int:
    """The high-water mark since the last `reset_peak_rss` (or since the process started)."""
    try:
        found = re.search(r"^VmHWM:\s+(\d+) kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        found = None
    if found is not None:
        return int(found.group(1)) * 1024
    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit  # the process's peak


def step_thread() -> concurrent.futures.ThreadPoolExecutor:
    """One worker thread for every optimiser step of a run (see the module docstring for why one)."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="envhub-train-step")
