"""The trainer process's memory: the peak resident set of each step, and when free pages go back.

Peak RSS per step: Linux keeps a process's high-water mark (VmHWM) and lets the process reset it
(`/proc/self/clear_refs`), so each step's peak is read, not guessed from samples. Where the reset is not
available the figure is the process's peak so far (it still shows growth, though never a fall). The
reset is the kernel's one high-water mark: `getrusage`'s ru_maxrss (and so `/usr/bin/time -v`) then
report the peak since the last step began, not the run's; the run's peak is the largest step's.

Every step runs on one thread (the process's tensor thread, `envhub.inference.tensor_thread`): glibc
gives each thread a malloc arena of its own and keeps
the memory freed in it for that arena's next allocations. Steps handed to whichever thread of a pool was
idle left each step's activations (1.5 GiB for SmolLM2-135M) behind in another arena, so RSS grew by about
that much a step (measured: 5.6 GiB after the first step, 12 GiB after six) while the memory in use stayed
flat. One thread reuses its own freed memory every step.

A step's activations differ in shape from the last's, so they do not fit the holes it left exactly, and
the arena creeps up (~30 MiB a step measured: 6.19 GiB at step 2, 6.33 at step 8). Returning every free
page after every step (`release_free_memory`) stopped the creep, but each step then faulted its
activations back in: 0.43 s a step for bench-trl's (7.92 s warm against 8.35 s after a release, 83 k
against 304 k page faults, 8 steps each alternated in one process), plus 0.1 s for the release itself.
So `FreeMemoryKeeper` keeps what a step reuses and releases only once the RSS after a step has grown
`RELEASE_GROWTH` over its base: the creep stays bounded (10% here), and most steps find their memory
already mapped.

glibc also gives memory back on its own, and each of its ways made bench-trl's steps fault their memory
back in (150-300 k page faults a step beside the vLLM engine): a block over the mmap threshold (at most
32 MiB; the vocabulary-wide logits are ~170 MiB) is a mapping of its own, unmapped when freed; a thread
arena's 64 MiB heap that empties is unmapped, whatever the trim threshold; a free top of a heap over the
trim threshold is trimmed; and a thread arena maps any block over 64 MiB apart. `keep_freed_memory`
turns the four off, so that `FreeMemoryKeeper`'s release is the one way memory goes back.

What is left is the TLB: a step's GEMMs stream weights, activations and gradients of ~5 GiB in 4 KiB
pages. `huge_pages_for_tensors` has PyTorch back its blocks of 2 MiB and over with transparent huge pages
(`THP_MEM_ALLOC_ENABLE`: PyTorch's `madvise(MADV_HUGEPAGE)` on each such block, which the kernel honours
in its default `madvise` mode as in `always`). bench-trl's step beside a vLLM engine, separate processes
in four pairs: median 5.77-6.56 s a step with them against 6.28-7.05 s without, faster in every pair
(docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import resource
import sys
from collections.abc import Callable
from pathlib import Path

RELEASE_GROWTH = 1.1
"""How far the RSS after a step may grow over the RSS after the first step since the last release before
malloc's free pages go back to the system."""

_STATUS = Path("/proc/self/status")
_STATM = Path("/proc/self/statm")
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


def release_free_memory() -> bool:
    """Return the free pages of every malloc arena to the system (glibc's malloc_trim); False where the
    C library has no such call (musl, macOS), which changes nothing but the RSS between steps."""
    trim = _libc("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -2, -4, -8  # glibc's <malloc.h>
_HEAP_BYTES = 64 * 2**20  # a thread arena's heap on 64-bit glibc (HEAP_MAX_SIZE)


def keep_freed_memory() -> bool:
    """Make malloc keep freed memory for the next allocations instead of unmapping it (see above): every
    block in a heap, no automatic trim, a top pad of a whole heap (with which glibc keeps a thread
    arena's empty heap), and one arena, so that threads started from here on (the tensor thread) share
    the main one, whose heap has no size limit (a thread arena maps a block over its 64 MiB heaps apart).
    Process-wide, for the rest of the process (the trainer's process is its own); False where the C
    library is not glibc, which changes nothing but page faults."""
    mallopt = _libc("mallopt")
    if mallopt is None:
        return False
    settings = (
        (_M_ARENA_MAX, 1),
        (_M_MMAP_MAX, 0),
        (_M_TRIM_THRESHOLD, 2**31 - 1),
        (_M_TOP_PAD, _HEAP_BYTES),
    )
    return all(mallopt(parameter, value) == 1 for parameter, value in settings)


_THP_VARIABLE = "THP_MEM_ALLOC_ENABLE"
_SMAPS = Path("/proc/self/smaps")


def huge_pages_for_tensors() -> bool:
    """Back PyTorch's large CPU tensors (2 MiB and over) with transparent huge pages, for the rest of the
    process; True when they are (see the module docstring).

    PyTorch reads `THP_MEM_ALLOC_ENABLE` once, at the first large allocation, and keeps the answer: here
    that allocation is a probe, made with the variable set, which is then removed again, so no child
    process inherits it; a value the environment already has is left to decide. The answer is the
    kernel's: whether the probe's mapping may hold huge pages (`THPeligible` in /proc/self/smaps). False
    in a process that allocated a large tensor before (too late), where the kernel's mode is `never`,
    and where /proc does not say."""
    import torch

    asked = _THP_VARIABLE not in os.environ
    if asked:
        os.environ[_THP_VARIABLE] = "1"
    try:
        probe = torch.empty(4 * 2**20, dtype=torch.uint8)
    finally:
        if asked:
            del os.environ[_THP_VARIABLE]
    return _huge_page_eligible(probe.data_ptr())


def _huge_page_eligible(address: int) -> bool:
    """Whether the kernel may back the mapping that holds `address` with transparent huge pages."""
    try:
        lines = _SMAPS.read_text().splitlines()
    except OSError:
        return False
    inside = False
    for line in lines:
        first = line.split(maxsplit=1)[0] if line else ""
        if not first.endswith(":"):  # a mapping's header: "start-end perms ..."
            start, _, end = first.partition("-")
            inside = int(start, 16) <= address < int(end, 16)
        elif inside and first == "THPeligible:":
            return line.split()[1] == "1"
    return False


def resident_bytes() -> int | None:
    """The process's resident set now; None where /proc does not say."""
    try:
        pages = int(_STATM.read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * resource.getpagesize()


class FreeMemoryKeeper:
    """Returns malloc's free pages to the system after a step only when the process has outgrown what
    its steps reuse: its RSS over `RELEASE_GROWTH` times its base, the RSS after the first step since
    the last release (malloc's own count of free memory cannot tell: a released page stays a free chunk).

    The process's first `settling_steps` set no base: no weight sync came before the first step, and the
    memory a sync and the generation after it keep (`keep_freed_memory`) is in every later step's RSS. A
    base taken after the first step was outgrown at once (bench-trl: 4.27 -> 5.06 GiB), and the release
    it set off made the third step fault its memory back in."""

    def __init__(
        self,
        growth: float = RELEASE_GROWTH,
        resident: Callable[[], int | None] = resident_bytes,
        settling_steps: int = 1,
    ) -> None:
        self.growth = growth
        self._resident = resident
        self._settling = settling_steps
        self.baseline: int | None = None

    def after_step(self) -> bool:
        """Release if due; returns whether free pages went back to the system."""
        now = self._resident()
        if now is None:  # nothing to compare: release every step, which bounds the creep all the same
            return release_free_memory()
        if self._settling > 0:
            self._settling -= 1
            return False
        if self.baseline is None:
            self.baseline = now
            return False
        if now <= self.baseline * self.growth:
            return False
        self.baseline = None  # the next step faults its memory back in: its RSS is the new base
        return release_free_memory()


@functools.cache
def _libc(name: str) -> Callable[..., int] | None:
    """A function of the C library this process runs on; None where it has no such function."""
    try:
        function: Callable[..., int] = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    return function
