"""The trainer's memory: each step's peak RSS is measured and logged, and it stays flat across steps.

Steps once ran on whichever idle thread asyncio's pool had, and glibc keeps what a thread frees in that
thread's own malloc arena: a step on another thread left the last one's activations behind, and RSS grew
by about one step's activations each time. The run here makes activations the bulk of a step's memory
(8 layers, 24 sequences of about 70 tokens in one micro-batch, a model of 5 M parameters, 4 new tokens a
reply) so that growth would show.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from envhub_trainer import memory
from envhub_trainer.grpo import train
from envhub_trainer.testing import Digits, digits_config
from typer.testing import CliRunner

import envhub
from envhub.cli import app
from envhub.testing.tiny_model import tiny_chat_model

MIB = 2**20


PEAK_CHECK = """
from envhub_trainer import memory
MIB = 2**20
assert memory.reset_peak_rss(), "this Linux refused to reset the peak RSS (/proc/self/clear_refs)"
before = memory.peak_rss_bytes()
block = bytearray(256 * MIB)
block[::4096] = b"\\1" * len(range(0, len(block), 4096))  # touch every page: resident, not just mapped
assert memory.peak_rss_bytes() >= before + 250 * MIB, (before, memory.peak_rss_bytes())
del block  # a block this large is its own mapping, returned to the system when freed
assert memory.reset_peak_rss()
assert memory.peak_rss_bytes() < before + 100 * MIB, (before, memory.peak_rss_bytes())
"""


def test_the_peak_is_measured_and_restarts_where_asked() -> None:
    """In a fresh interpreter: inside the suite's process, gigabytes held by earlier tests (and freed
    memory malloc keeps) make the figures say nothing about the measurement itself."""
    run_in_a_fresh_interpreter(PEAK_CHECK)


HEAP_RELEASE_CHECK = """
import gc
from envhub_trainer import memory
MIB = 2**20
gc.disable()  # no collection between the two readings frees anything but the blocks
held, freed = [], []
for _ in range(3200):  # 3200 x 64 KiB = 200 MiB, below the 128 KiB at which malloc maps blocks apart
    freed.append(bytearray(b"\\1" * 64 * 1024))  # written, so resident
    held.append(bytearray(1024))  # over 512 bytes: from malloc too, not Python's own allocator
before = memory.resident_bytes()
freed.clear()
kept = memory.resident_bytes()
assert kept > before - 50 * MIB, (before, kept)  # still resident: holes between the held blocks
assert memory.release_free_memory(), "malloc_trim is not in this C library"
assert memory.resident_bytes() < kept - 150 * MIB, (kept, memory.resident_bytes())
assert len(held) == 3200
"""


def test_freed_heap_memory_goes_back_to_the_system() -> None:
    """Blocks small enough for malloc's heap, each followed by one that stays: freeing the first kind
    leaves holes malloc keeps (only a free top of the heap is returned by itself) until released. In a
    fresh interpreter: in the suite's process, earlier tests' free chunks decide where the blocks land
    (one run saw 122 MiB go back by itself)."""
    run_in_a_fresh_interpreter(HEAP_RELEASE_CHECK)


REUSE_CHECK = """
import resource, threading
from envhub_trainer import memory
MIB = 2**20
if {keep}:
    assert memory.keep_freed_memory(), "mallopt is not in this C library"
faults = []
def steps():  # on a thread started afterwards, as the trainer's tensor thread
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        blocks = [bytearray(170 * MIB), *(bytearray(40 * MIB) for _ in range(4))]  # zero-filled: touched
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
        del blocks
thread = threading.Thread(target=steps)
thread.start()
thread.join()
print(*faults)
"""


@pytest.mark.parametrize("keep", [False, True])
def test_a_step_reuses_the_memory_the_last_one_freed(keep: bool) -> None:
    """Blocks of a step's sizes (the logits' ~170 MiB, activations of tens of MiB) freed and allocated
    again on one thread: glibc unmaps each when it is freed and the next step faults it back in, one
    fault a page, unless `keep_freed_memory` made malloc keep it. Without it is the control: it shows
    the faults are counted where the check looks for them."""
    first, *later = (int(n) for n in run_in_a_fresh_interpreter(REUSE_CHECK.format(keep=keep)).split())
    assert first > 300 * MIB // 4096, first  # the first round faults its ~330 MiB in, either way
    if keep:
        assert max(later) < first // 20, (first, later)
    else:
        assert min(later) > first // 2, (first, later)


HUGE_PAGES_CHECK = """
import os
import torch
from envhub_trainer import memory
if {late}:
    early = torch.ones(8 * 2**20, dtype=torch.uint8)  # a large tensor before the call: too late
verdict = memory.huge_pages_for_tensors()
assert "THP_MEM_ALLOC_ENABLE" not in os.environ  # removed again: no child process inherits it
weights = torch.ones(64 * 2**20, dtype=torch.uint8)
small = torch.ones(1024, dtype=torch.uint8)
print(verdict, memory._huge_page_eligible(weights.data_ptr()), memory._huge_page_eligible(small.data_ptr()))
"""
_THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.mark.skipif(
    not _THP_MODE.exists() or "[never]" in _THP_MODE.read_text(),
    reason="this kernel has transparent huge pages off (/sys/kernel/mm/transparent_hugepage/enabled)",
)
@pytest.mark.parametrize("late", [False, True])
def test_large_tensors_get_huge_pages_when_asked_before_the_first(late: bool) -> None:
    """The kernel's own word (THPeligible of the tensor's mapping) on a large tensor allocated after the
    call: huge pages when the call came first, none when a large tensor came before it, and the verdict
    says which. A small tensor stays in malloc's ordinary pages either way."""
    verdict, weights, small = run_in_a_fresh_interpreter(HUGE_PAGES_CHECK.format(late=late)).split()
    assert (verdict, weights, small) == (("False", "False", "False") if late else ("True", "True", "False"))


def run_in_a_fresh_interpreter(check: str) -> str:
    """What `check` printed, once it ran to the end in a new Python process."""
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_free_pages_go_back_only_once_the_process_outgrows_its_steps() -> None:
    """Released every step, each step faults its activations back in (memory.py); kept, they creep. The
    first step sets no base (no weight sync came before it): the second does, and after a release the
    next step."""
    figures = iter([50, 100, 110, 111, 80, 87, 89])
    keeper = memory.FreeMemoryKeeper(growth=1.1, resident=lambda: next(figures) * MIB)
    assert [keeper.after_step() for _ in range(7)] == [False, False, False, True, False, False, True]


KEEPER_CHECK = """
from envhub_trainer import memory
MIB = 2**20
keeper = memory.FreeMemoryKeeper(growth=1.5, settling_steps=0)
assert not keeper.after_step()  # the base
held, freed = [], []
for _ in range(4800):  # 300 MiB of 64 KiB blocks, with a kept block after each: holes malloc keeps
    freed.append(bytearray(b"\1" * 64 * 1024))
    held.append(bytearray(1024))
freed.clear()
grown = memory.resident_bytes()
assert grown > keeper.baseline * 1.5, (grown, keeper.baseline)
assert keeper.after_step(), "malloc_trim is not in this C library"
assert memory.resident_bytes() < grown - 250 * MIB, (grown, memory.resident_bytes())
"""


def test_a_grown_process_gives_its_free_pages_back() -> None:
    """In a fresh interpreter, whose RSS the 300 MiB of holes make grow by half (the suite's would not)."""
    run_in_a_fresh_interpreter(KEEPER_CHECK)


class LongDigits(Digits):
    """The digits env with a long prompt: training sequences of about 70 tokens for 4 sampled ones."""

    def setup(self, rng: random.Random) -> str:
        return super().setup(rng) + " Reply with digits and nothing else, please." * 4


@pytest.mark.slow
def test_a_runs_peak_rss_is_logged_and_flat_from_step_to_step(tmp_path: Path) -> None:
    envhub.register("long-digits-test-v0", LongDigits, override=True)
    model = tiny_chat_model(tmp_path / "model", vocab_size=300, hidden_size=256, layers=8, heads=4)
    run_dir = tmp_path / "run"
    config = digits_config(
        model,
        run_dir,
        env_id="long-digits-test-v0",
        steps=8,
        concurrency=24,
        # One reply a generate call: generation runs on asyncio's pool threads (envhub's batcher), and a
        # small call leaves little behind in each of their arenas, so the step's own memory shows.
        generation_batch_size=1,
        micro_batch_size=24,  # the step's 24 sequences in one forward pass
        checkpoint_every=0,
        verify_sync=False,
    )
    rows = train(config)
    tokens = rows[-1]["train_tokens_per_second"] * rows[-1]["train_seconds"]
    assert tokens > 24 * 60, tokens  # the sequences are as long as the growth below needs
    peaks = [row["peak_rss_gib"] * 1024 for row in rows]  # MiB
    # The first step allocates what stays (gradients, Adam's moments); from the second on a step needs
    # what the one before freed. A step's transient memory here is about 850 MiB (measured: on a new
    # thread each step, peaks went 1558, 1559, 2421, 2448, 3297, 4129, 4933 MiB), where one thread
    # moves by tens of MiB.
    assert max(peaks[2:]) - peaks[1] < 300, [round(p) for p in peaks]

    result = CliRunner().invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    page = (run_dir / "report.html").read_text()
    assert "Memory (GiB)" in page
    top = max(range(len(rows)), key=lambda i: rows[i]["peak_rss_gib"])
    assert f"Peak RSS: {rows[top]['peak_rss_gib']:.2f} GiB at step {rows[top]['step']}" in page
    # the page says what the process ran with, as the run folder recorded it
    (start,) = [json.loads(line) for line in (run_dir / "runtime.jsonl").read_text().splitlines()]
    huge, kept = ("yes" if start[flag] else "no" for flag in ("huge_pages", "kept_freed_memory"))
    assert f"The process: started {start['started_at']}: torch {start['torch']}," in page
    assert f"huge pages for large tensors {huge}, freed memory kept {kept}." in page
