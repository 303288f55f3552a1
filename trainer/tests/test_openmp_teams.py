"""A training run starts OpenMP's parallel work from one thread only (envhub.inference.tensor_thread).

libgomp keeps a team of workers for every thread that starts parallel work; with more workers than cores
they sleep between parallel regions instead of spinning, and a step runs 1.5x slower (bench-trl). The
run's process is watched from inside: a preloaded library wraps libgomp's `GOMP_parallel` and writes down
each thread that calls it, so any thread that loads, generates or trains on its own shows up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef void (*parallel_fn)(void (*)(void *), void *, unsigned, unsigned);

void GOMP_parallel(void (*fn)(void *), void *data, unsigned threads, unsigned flags) {
  static parallel_fn real;
  static __thread int written;
  if (!real) real = (parallel_fn)dlsym(RTLD_NEXT, "GOMP_parallel");
  if (!written) {
    FILE *log = fopen(getenv("OMP_MASTERS_LOG"), "a");
    if (log) { fprintf(log, "%ld\n", (long)syscall(SYS_gettid)); fclose(log); }
    written = 1;
  }
  real(fn, data, threads, flags);
}
"""

RUN = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from envhub_trainer.grpo import train
    from envhub_trainer.testing import digits_config, register_digits

    register_digits()
    train(digits_config(Path(sys.argv[1]), Path(sys.argv[2]), steps=2, checkpoint_every=0))
    """
)


@pytest.fixture(scope="module")
def masters_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None or not sys.platform.startswith("linux"):
        pytest.skip("needs a C compiler and glibc to wrap libgomp (make prerequisites installs gcc)")
    folder = tmp_path_factory.mktemp("shim")
    (folder / "shim.c").write_text(SHIM)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-o", str(folder / "shim.so"), str(folder / "shim.c"), "-ldl"],
        check=True,
    )
    return folder / "shim.so"


def test_loading_generating_and_training_start_parallel_work_from_one_thread(
    tiny_model: Path, tmp_path: Path, masters_shim: Path
) -> None:
    log = tmp_path / "masters.log"
    env = {
        **os.environ,
        "LD_PRELOAD": str(masters_shim),
        "OMP_MASTERS_LOG": str(log),
        "OMP_NUM_THREADS": "2",  # a team even on a one-core machine
    }
    subprocess.run(
        [sys.executable, "-c", RUN, str(tiny_model), str(tmp_path / "run")], env=env, check=True, timeout=600
    )
    masters = set(log.read_text().split())
    assert len(masters) == 1, f"threads that started OpenMP teams: {sorted(masters)}"
